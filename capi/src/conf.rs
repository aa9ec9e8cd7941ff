//! The configuration string: `key:value` pairs separated by commas, in the
//! spirit of `PYTORCH_CUDA_ALLOC_CONF`. Read from `somalloc_configure` or,
//! when that was never called, from the environment variable
//! `SOMALLOC_CONF` at the first use.

use somalloc_rs::plan::Sharing;
use somalloc_rs::{CacheConfig, Headroom, ReusePolicy};

/// The variable read when no configuration was given.
pub const ENV: &str = "SOMALLOC_CONF";

/// Which pool serves a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolChoice {
    /// A pool somalloc creates for itself on each device (the default):
    /// nothing it sets changes the pools other libraries use.
    Own,
    /// The device's default pool (shared with every other user of the
    /// runtime's stream-ordered allocator in the process).
    Default,
    /// A virtual-memory arena per device (`somalloc::VmmArena`): memory
    /// mapped in chunks that somalloc splits, merges and gives back, with
    /// an own pool behind it for the allocations of capturing streams
    /// (graph memory) and for what the arena cannot serve. Where the device
    /// or the runtime has no virtual-memory management, the own pool alone
    /// serves the device (one line on stderr says why).
    Vmm,
    /// The arena where it can serve as the allocator nobody configured
    /// (`somalloc::VmmArena::as_default`), else the own pool, with one line
    /// on stderr that says why and names `pool:own`: where the device or
    /// runtime has no virtual-memory management, where the runtime could
    /// not give the arena's memory back (ROCm faults), or where reserving
    /// its address space fails.
    Auto,
}

/// A parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conf {
    pub pool: PoolChoice,
    /// Bytes the pool keeps at a synchronisation; `u64::MAX` keeps all.
    /// With `pool:vmm`, also the idle bytes the arena keeps mapped when it
    /// grows (`u64::MAX`: it keeps them until a trim).
    pub release_threshold: u64,
    /// The pool's reuse policy; `None` leaves the runtime's. With
    /// `pool:vmm`, that of the own pool behind the arena.
    pub reuse: Option<ReusePolicy>,
    /// Largest size of an own pool (`None`: no limit). With `pool:vmm`,
    /// also the most memory the arena maps.
    pub max_size: Option<usize>,
    /// The cache tier in front of the pool, or `None` for the pool alone.
    pub cache: Option<CacheConfig>,
    /// Record every allocation and free into this trace file (`%p`: the
    /// process id), or `None`.
    pub trace: Option<String>,
    /// With a backtrace at every allocation of the trace.
    pub trace_backtraces: bool,
    /// Serve allocations from a placement planned from this trace of an
    /// earlier run (`plan.rs`), or `None`.
    pub plan: Option<String>,
    /// `plan:auto`: plan in this run (`auto.rs`): the first steps recorded
    /// in memory, their repeated step planned, served from a later step.
    pub plan_auto: bool,
    /// The plan's streams share one arena, bytes passing from a stream to
    /// another by this rule (`None`: an arena per stream).
    pub plan_share: Option<Sharing>,
    /// `plan_divert:` (deprecated, ignored): bytes of a shared plan's slots
    /// to serve elsewhere once their waits stall their stream (0: none).
    pub plan_divert: u64,
    /// Time every wait of a shared plan on the device (what the statistics'
    /// `plan_wait_stall_ns` adds up).
    pub plan_time_waits: bool,
    /// With the trace: the time the device reached each allocation and
    /// free (what `plan_share:device` plans with).
    pub trace_device: bool,
    /// Grant every device that can reach a device's pool read-write access
    /// to it (so that copies between devices, which PyTorch makes, can read
    /// and write pool memory).
    pub peer_access: bool,
    /// With `pool:vmm`: the arena's growth moves wholly free chunks before
    /// it makes memory (`somalloc::ArenaOptions::moves`; on by default).
    pub arena_moves: bool,
    /// With `pool:vmm`: every block within one physical allocation
    /// (`somalloc::ArenaOptions::whole_blocks`; off by default), for NCCL's
    /// buffer registration before NCCL 2.29.2.
    pub arena_whole_blocks: bool,
    /// With `pool:vmm`: a stream that would grow the arena first takes
    /// another stream's frees by a device wait
    /// (`somalloc::ArenaOptions::stream_waits`; on by default).
    pub arena_stream_waits: bool,
}

impl Default for Conf {
    fn default() -> Conf {
        Conf {
            pool: PoolChoice::Own,
            release_threshold: u64::MAX,
            reuse: None,
            max_size: None,
            cache: Some(CacheConfig::default()),
            trace: None,
            trace_backtraces: false,
            plan: None,
            plan_auto: false,
            plan_share: None,
            plan_divert: 0,
            plan_time_waits: false,
            trace_device: false,
            peer_access: true,
            arena_moves: true,
            arena_whole_blocks: false,
            arena_stream_waits: true,
        }
    }
}

/// `plan:auto`'s sharing between streams when `plan_share` is not given:
/// bytes pass from a stream to another freed 10 ms or more before in the
/// recording.
const AUTO_SHARE_NS: u64 = 10_000_000;

/// The keys, for messages and the documentation.
///
/// `pool` is `own` (the default), `default` or `vmm`. With `pool:vmm` the
/// keys of the pool mean: `release_threshold`, the idle bytes the arena
/// keeps mapped when it grows (above them it gives idle chunks back first;
/// `max` keeps them until a trim), and the threshold of the own pool behind
/// it too; `max_size`, the most memory the arena maps (an allocation past
/// it is out of memory, after the arena's recovery) and that pool's
/// largest size; `reuse`, the reuse policy of that own pool (which serves the
/// allocations of capturing streams and what the arena cannot serve).
pub const KEYS: &str = "pool, release_threshold, reuse, max_size, cache, cache_total_cap, \
                        cache_per_stream_cap, cache_max_block, cache_reuse_larger, cache_headroom, trace, \
                        trace_backtraces, trace_device, plan, plan_share, plan_divert, plan_time_waits, \
                        peer_access, arena_moves, arena_whole_blocks, arena_stream_waits";

impl Conf {
    /// Parses `text` over the defaults. Empty text (or only commas and
    /// spaces) is the defaults. Unknown keys, bad values and repeated keys
    /// are errors that name the key.
    pub fn parse(text: &str) -> Result<Conf, String> {
        let mut conf = Conf::default();
        let mut cache_on = true;
        let mut cache = CacheConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once(':')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| format!("`{item}` is not key:value (keys: {KEYS})"))?;
            if seen.contains(&key) {
                return Err(format!("`{key}` is given twice"));
            }
            seen.push(key);
            let bad = |what: &str| format!("{key}:{value}: {what}");
            match key {
                "pool" => {
                    conf.pool = match value {
                        "own" => PoolChoice::Own,
                        "default" => PoolChoice::Default,
                        "vmm" => PoolChoice::Vmm,
                        "auto" => PoolChoice::Auto,
                        _ => return Err(bad("expected own, default or vmm, or auto")),
                    }
                }
                "release_threshold" => conf.release_threshold = parse_bytes(value).map_err(|e| bad(&e))?,
                "reuse" => conf.reuse = Some(parse_reuse(value).map_err(|e| bad(&e))?),
                "max_size" => {
                    let n = parse_bytes(value).map_err(|e| bad(&e))?;
                    if n == 0 || n == u64::MAX {
                        return Err(bad("expected a size above 0"));
                    }
                    conf.max_size = Some(usize::try_from(n).map_err(|_| bad("too large"))?);
                }
                "cache" => cache_on = parse_switch(value).map_err(|e| bad(&e))?,
                "cache_total_cap" => cache = cache.total_cap(parse_usize(value).map_err(|e| bad(&e))?),
                "cache_per_stream_cap" => {
                    cache = cache.per_stream_cap(parse_usize(value).map_err(|e| bad(&e))?)
                }
                "cache_max_block" => cache = cache.max_block_bytes(parse_usize(value).map_err(|e| bad(&e))?),
                "cache_reuse_larger" => {
                    cache = cache.reuse_larger(match parse_share(value, "a budget").map_err(|e| bad(&e))? {
                        Share::Off => None,
                        Share::On => CacheConfig::default().reuse_larger,
                        Share::PerMille(p) => Some(Headroom::new(0, p)),
                    })
                }
                // The footprint guard: `off`, `on` (4 MiB or 3.2 % of the
                // live peak), or a share of the live peak in permille.
                "cache_headroom" => {
                    cache = cache.headroom(match parse_share(value, "a headroom").map_err(|e| bad(&e))? {
                        Share::Off => None,
                        Share::On => Some(Headroom::default()),
                        Share::PerMille(p) => Some(Headroom::default().peak_per_mille(p)),
                    })
                }
                // Recording: `off`, or the trace file's path (no commas;
                // `%p` is the process id).
                "trace" => {
                    conf.trace = match value {
                        "off" | "false" | "0" | "False" => None,
                        "on" | "true" | "1" | "True" => {
                            return Err(bad(
                                "expected off or the trace file's path (e.g. trace:/tmp/run-%p.trace)",
                            ))
                        }
                        "" => return Err(bad("expected off or the trace file's path")),
                        path => Some(path.to_string()),
                    }
                }
                "trace_backtraces" => conf.trace_backtraces = parse_switch(value).map_err(|e| bad(&e))?,
                // Planned placement: `off`, or the path of a trace of an
                // earlier run of the same program.
                "plan" => {
                    conf.plan_auto = value == "auto";
                    conf.plan = match value {
                        "off" | "false" | "0" | "False" | "auto" => None,
                        "" | "on" | "true" | "1" | "True" => return Err(bad(
                            "expected off, auto, or the path of a trace of an earlier run (e.g. plan:/tmp/run.trace)",
                        )),
                        path => Some(path.to_string()),
                    }
                }
                // Streams sharing the plan's arena: `off`, the host lag in
                // milliseconds (0 to 10000, fractions allowed), `device` or
                // `device+MS` (the recorded run's device times).
                "plan_share" => {
                    conf.plan_share = match Sharing::parse(value).map_err(|e| bad(&e))? {
                        Sharing::Never => None,
                        rule => Some(rule),
                    }
                }
                // Deprecated (accepted for this release, ignored, and said
                // so once on stderr by `plan::load_or_explain`): memory a
                // shared plan may give up for time (`off` or a size).
                "plan_divert" => {
                    conf.plan_divert = match value {
                        "off" | "false" | "0" | "False" => 0,
                        _ => match parse_bytes(value).map_err(|e| bad(&e))? {
                            u64::MAX => return Err(bad("expected off or a size")),
                            n => n,
                        },
                    }
                }
                // Time a shared plan's waits on the device (`on`/`off`).
                "plan_time_waits" => conf.plan_time_waits = parse_switch(value).map_err(|e| bad(&e))?,
                "trace_device" => conf.trace_device = parse_switch(value).map_err(|e| bad(&e))?,
                "peer_access" => conf.peer_access = parse_switch(value).map_err(|e| bad(&e))?,
                "arena_moves" => conf.arena_moves = parse_switch(value).map_err(|e| bad(&e))?,
                "arena_whole_blocks" => conf.arena_whole_blocks = parse_switch(value).map_err(|e| bad(&e))?,
                "arena_stream_waits" => conf.arena_stream_waits = parse_switch(value).map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown key `{key}` (keys: {KEYS})")),
            }
        }
        conf.cache = cache_on.then_some(cache);
        if conf.plan_auto && !seen.contains(&"plan_share") {
            // `plan:auto` shares one arena between the streams unless told
            // otherwise. On the models benchmark's two-stream mix (one run
            // on an H200, `pool:vmm`) the footprint after the switch was
            // 8520 MiB against 11166 with an arena per stream, for steps
            // 1.02 times as long.
            conf.plan_share = Some(Sharing::HostLag(AUTO_SHARE_NS));
        }
        if conf.trace.is_some()
            && conf.trace_device
            && conf.reuse.is_none()
            && matches!(conf.pool, PoolChoice::Own | PoolChoice::Vmm | PoolChoice::Auto)
        {
            // Device times show each stream's own progress: a pool that
            // hands a block freed on one stream to another makes the
            // second wait for the first (the runtime's internal
            // dependencies), which the times would then count as the
            // second stream's own.
            conf.reuse = Some(ReusePolicy::NONE);
        }
        Ok(conf)
    }
}

/// `off`, `on`, or a share of the live peak in permille (`250` or
/// `250permille`).
enum Share {
    Off,
    On,
    PerMille(u32),
}

fn parse_share(value: &str, what: &str) -> Result<Share, String> {
    match value {
        "off" | "false" | "0" => Ok(Share::Off),
        "on" | "true" => Ok(Share::On),
        n => n
            .strip_suffix("permille")
            .unwrap_or(n)
            .trim()
            .parse()
            .map(Share::PerMille)
            .map_err(|_| format!("expected on, off or {what} in permille of the live peak")),
    }
}

fn parse_switch(value: &str) -> Result<bool, String> {
    match value {
        "on" | "true" | "1" | "True" => Ok(true),
        "off" | "false" | "0" | "False" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

fn parse_usize(value: &str) -> Result<usize, String> {
    let n = parse_bytes(value)?;
    if n == u64::MAX {
        return Ok(usize::MAX);
    }
    usize::try_from(n).map_err(|_| "too large".into())
}

/// A byte count: digits with an optional binary unit (`K`, `KiB`, `M`,
/// `MiB`, `G`, `GiB`, `T`, `TiB`; `KB`, `MB`, ... are read as binary too),
/// or `max` (all).
pub fn parse_bytes(value: &str) -> Result<u64, String> {
    if value.eq_ignore_ascii_case("max") {
        return Ok(u64::MAX);
    }
    let digits = value.chars().take_while(|c| c.is_ascii_digit()).count();
    let (number, unit) = value.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{value}` is not a byte count (e.g. 512MiB, 2GiB, 1048576, max)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown unit `{other}` in `{value}`")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{value}` does not fit in 64 bits"))
}

/// `none`, `all`, or `+`-separated flags: `events` (follow event
/// dependencies), `opportunistic`, `internal` (internal dependencies).
fn parse_reuse(value: &str) -> Result<ReusePolicy, String> {
    let mut policy = ReusePolicy::NONE;
    match value {
        "none" => return Ok(policy),
        "all" => return Ok(ReusePolicy::ALL),
        _ => {}
    }
    for flag in value.split('+').map(str::trim) {
        policy = match flag {
            "events" => policy.follow_event_dependencies(true),
            "opportunistic" => policy.allow_opportunistic(true),
            "internal" => policy.allow_internal_dependencies(true),
            _ => {
                return Err(format!(
                    "unknown reuse flag `{flag}` (none, all, or events+opportunistic+internal)"
                ))
            }
        };
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_every_key() {
        assert_eq!(Conf::parse("").unwrap(), Conf::default());
        assert_eq!(Conf::parse(" , ").unwrap(), Conf::default());
        let c = Conf::parse(
            "pool:default, release_threshold:512MiB,reuse:events+internal,max_size:8G,cache:on,\
             cache_total_cap:2GiB,cache_per_stream_cap:64M,cache_max_block:16MiB,cache_reuse_larger:250,cache_headroom:64,trace:off,\
             trace_backtraces:on",
        )
        .unwrap();
        assert_eq!(c.pool, PoolChoice::Default);
        assert_eq!(c.release_threshold, 512 << 20);
        let r = c.reuse.unwrap();
        assert!(r.follow_event_dependencies && !r.allow_opportunistic && r.allow_internal_dependencies);
        assert_eq!(c.max_size, Some(8 << 30));
        let cache = c.cache.unwrap();
        assert_eq!(
            (cache.total_cap, cache.per_stream_cap, cache.max_block_bytes),
            (2 << 30, 64 << 20, 16 << 20)
        );
        assert_eq!(cache.reuse_larger, Some(Headroom::new(0, 250)));
        assert_eq!(cache.headroom, Some(Headroom::new(4 << 20, 64)));
        assert_eq!(
            Conf::parse("cache_headroom:on").unwrap().cache.unwrap().headroom,
            Some(Headroom::default())
        );
        assert_eq!(Conf::parse("").unwrap().cache.unwrap().headroom, None);
        assert_eq!((c.trace.as_deref(), c.trace_backtraces), (None, true));
        let t = Conf::parse("trace:/tmp/run-%p.trace").unwrap();
        assert_eq!(t.trace.as_deref(), Some("/tmp/run-%p.trace"));
        assert_eq!(t.plan, None);
        let p = Conf::parse("plan:/tmp/run.trace").unwrap();
        assert_eq!(p.plan.as_deref(), Some("/tmp/run.trace"));
        assert_eq!(Conf::parse("plan:off").unwrap().plan, None);
        let a = Conf::parse("plan:auto,plan_share:10").unwrap();
        assert_eq!(
            (a.plan, a.plan_auto, a.plan_share),
            (None, true, Some(Sharing::HostLag(10_000_000)))
        );
        // plan:auto shares by default; plan_share:off keeps an arena per
        // stream; a trace's plan does not share unless asked.
        let a = Conf::parse("plan:auto").unwrap();
        assert_eq!(a.plan_share, Some(Sharing::HostLag(10_000_000)));
        let a = Conf::parse("plan_share:off,plan:auto").unwrap();
        assert_eq!(a.plan_share, None);
        let a = Conf::parse("plan:auto,plan_share:2.5").unwrap();
        assert_eq!(a.plan_share, Some(Sharing::HostLag(2_500_000)));
        assert_eq!(Conf::parse("plan:/tmp/run.trace").unwrap().plan_share, None);
        assert!(!Conf::parse("plan:./auto").unwrap().plan_auto);
        assert!(!Conf::parse("plan:off").unwrap().plan_auto);
        assert_eq!(t.plan_share, None);
        let s = Conf::parse("plan:/tmp/run.trace,plan_share:7.5").unwrap();
        assert_eq!(s.plan_share, Some(Sharing::HostLag(7_500_000)));
        let d = Conf::parse("plan_share:device,trace_device:on").unwrap();
        assert_eq!(
            (d.plan_share, d.trace_device),
            (
                Some(Sharing::Device {
                    margin_ns: 15_000_000
                }),
                true
            )
        );
        // Recording device times, the own pool passes no block between
        // streams, unless asked to.
        let r = Conf::parse("trace:/tmp/t,trace_device:on").unwrap();
        assert_eq!(r.reuse, Some(ReusePolicy::NONE));
        let r = Conf::parse("trace:/tmp/t,trace_device:on,reuse:all").unwrap();
        assert_eq!(r.reuse, Some(ReusePolicy::ALL));
        assert_eq!(
            Conf::parse("trace:/tmp/t,trace_device:on,pool:default")
                .unwrap()
                .reuse,
            None
        );
        let d = Conf::parse("plan_share:device+2.5").unwrap();
        assert_eq!(d.plan_share, Some(Sharing::Device { margin_ns: 2_500_000 }));
        assert!(!d.trace_device);
        assert_eq!(Conf::parse("plan_share:off").unwrap().plan_share, None);
        assert_eq!(d.plan_divert, 0);
        assert_eq!(Conf::parse("plan_divert:1GiB").unwrap().plan_divert, 1 << 30);
        assert_eq!(Conf::parse("plan_divert:off").unwrap().plan_divert, 0);
        assert!(!d.plan_time_waits);
        assert!(Conf::parse("plan_time_waits:on").unwrap().plan_time_waits);
        assert!(!Conf::parse("plan_time_waits:off").unwrap().plan_time_waits);
        assert!(!t.trace_backtraces);
        assert_eq!(
            Conf::parse("trace:C:/x.trace").unwrap().trace.as_deref(),
            Some("C:/x.trace")
        );
        assert_eq!(Conf::parse("cache:off").unwrap().cache, None);
        assert!(Conf::parse("").unwrap().peer_access);
        assert!(!Conf::parse("peer_access:off").unwrap().peer_access);
        assert_eq!(
            Conf::parse("cache_reuse_larger:off")
                .unwrap()
                .cache
                .unwrap()
                .reuse_larger,
            None
        );
        assert_eq!(
            Conf::parse("release_threshold:max").unwrap().release_threshold,
            u64::MAX
        );
        assert_eq!(Conf::parse("release_threshold:0").unwrap().release_threshold, 0);
        let none = Conf::parse("reuse:none").unwrap().reuse.unwrap();
        assert!(!none.follow_event_dependencies && !none.allow_opportunistic);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, says) in [
            ("bogus:1", "unknown key `bogus`"),
            ("cache", "not key:value"),
            ("cache:maybe", "cache:maybe"),
            ("release_threshold:12XB", "unknown unit"),
            ("release_threshold:lots", "not a byte count"),
            ("release_threshold:99999999999T", "does not fit"),
            ("reuse:events+sometimes", "unknown reuse flag"),
            ("max_size:0", "above 0"),
            ("pool:mine", "expected own, default or vmm, or auto"),
            ("trace:on", "the trace file's path"),
            ("trace:", "the trace file's path"),
            ("plan:on", "a trace of an earlier run"),
            ("plan:", "a trace of an earlier run"),
            ("plan_share:on", "milliseconds from 0 to 10000"),
            ("plan_share:device+", "device or device+MS"),
            ("plan_share:device-1", "device or device+MS"),
            ("trace_device:maybe", "trace_device:maybe"),
            ("plan_divert:max", "off or a size"),
            ("plan_divert:lots", "plan_divert:lots"),
            ("plan_share:-1", "milliseconds from 0 to 10000"),
            ("plan_share:NaN", "milliseconds from 0 to 10000"),
            ("trace_backtraces:maybe", "on or off"),
            ("peer_access:sometimes", "on or off"),
            ("cache:on,cache:off", "given twice"),
            ("cache_headroom:lots", "permille of the live peak"),
        ] {
            let e = Conf::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_virtual_memory_arena() {
        let c = Conf::parse("pool:vmm,release_threshold:256MiB,max_size:8GiB,reuse:none").unwrap();
        assert_eq!(c.pool, PoolChoice::Vmm);
        assert!(c.arena_moves);
        assert!(!Conf::parse("pool:vmm,arena_moves:off").unwrap().arena_moves);
        assert!(c.arena_stream_waits);
        assert!(
            !Conf::parse("pool:vmm,arena_stream_waits:off")
                .unwrap()
                .arena_stream_waits
        );
        assert!(!c.arena_whole_blocks);
        assert!(
            Conf::parse("pool:vmm,arena_whole_blocks:on")
                .unwrap()
                .arena_whole_blocks
        );
        assert!(Conf::parse("arena_moves:maybe").is_err());
        // The arena where it can serve as the default, with the same keys.
        let auto = Conf::parse("pool:auto,arena_moves:off").unwrap();
        assert_eq!(auto.pool, PoolChoice::Auto);
        assert!(!auto.arena_moves);
        assert_eq!(c.release_threshold, 256 << 20);
        assert_eq!(c.max_size, Some(8 << 30));
        assert_eq!(c.reuse, Some(ReusePolicy::NONE));
        assert!(c.cache.is_some());
        let d = Conf::parse("pool:vmm,cache:off").unwrap();
        assert_eq!(
            (d.pool, d.release_threshold, d.max_size, d.cache),
            (PoolChoice::Vmm, u64::MAX, None, None)
        );
        assert_eq!(
            Conf::parse("pool:vmm,trace:/tmp/t,trace_device:on")
                .unwrap()
                .reuse,
            Some(ReusePolicy::NONE)
        );
        assert!(Conf::parse("pool:vmm,max_size:0")
            .unwrap_err()
            .contains("above 0"));
        assert!(Conf::parse("pool:VMM")
            .unwrap_err()
            .contains("expected own, default or vmm, or auto"));
    }

    #[test]
    fn byte_units_are_binary() {
        assert_eq!(parse_bytes("1").unwrap(), 1);
        assert_eq!(parse_bytes("4K").unwrap(), 4096);
        assert_eq!(parse_bytes("4KB").unwrap(), 4096);
        assert_eq!(parse_bytes("3MiB").unwrap(), 3 << 20);
        assert_eq!(parse_bytes("2 GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1t").unwrap(), 1 << 40);
        assert_eq!(parse_bytes("MAX").unwrap(), u64::MAX);
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("-1").is_err());
    }
}
