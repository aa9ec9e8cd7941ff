//! The recording clock: nanoseconds since a recorder started, read at every
//! event.
//!
//! Reading the operating system's monotonic clock (`Instant`) costs about
//! 20 ns on a Linux machine whose clock source is the TSC, and more under
//! some hypervisors' clock sources; that read was most of an event's cost.
//! Where the processor's time-stamp counter runs at a constant rate in
//! every power state and is shared by all cores (the kernel's clock source
//! is `tsc`, or the CPU reports `constant_tsc` and `nonstop_tsc`), the
//! clock reads the counter instead (`rdtsc`, a few nanoseconds) and scales
//! it to nanoseconds by a ratio measured against `Instant` when the
//! recorder starts (over 2 ms: relative times are exact to about 2 × 10⁻⁵,
//! and the clock never runs backwards). Elsewhere, and when the variable
//! `SOMALLOC_TRACE_CLOCK` is `monotonic`, it reads `Instant`.

use std::time::{Duration, Instant};

/// Nanoseconds since a start, from the TSC or from `Instant`.
pub(crate) struct Clock {
    start: Instant,
    #[cfg(target_arch = "x86_64")]
    tsc: Option<Tsc>,
}

/// The counter at the start, and nanoseconds per tick as a 32.32 fixed
/// point number.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Tsc {
    start: u64,
    mult: u64,
}

impl Clock {
    /// A clock that starts now; measures the TSC's rate when it uses it.
    pub(crate) fn start() -> Clock {
        #[cfg(target_arch = "x86_64")]
        if tsc_usable() {
            if let Some((start, tsc)) = calibrate(Duration::from_millis(2)) {
                return Clock {
                    start,
                    tsc: Some(tsc),
                };
            }
        }
        Clock {
            start: Instant::now(),
            #[cfg(target_arch = "x86_64")]
            tsc: None,
        }
    }

    /// Whether the clock reads the time-stamp counter.
    pub(crate) fn uses_tsc(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.tsc.is_some();
        #[cfg(not(target_arch = "x86_64"))]
        return false;
    }

    /// Nanoseconds since the start.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if let Some(tsc) = self.tsc {
            // SAFETY: `rdtsc` exists on every x86-64 processor.
            let ticks = unsafe { core::arch::x86_64::_rdtsc() }.saturating_sub(tsc.start);
            return ((u128::from(ticks) * u128::from(tsc.mult)) >> 32) as u64;
        }
        self.start.elapsed().as_nanos() as u64
    }
}

/// Measures the counter against `Instant` over at least `span`; `None`
/// when the counter does not advance.
#[cfg(target_arch = "x86_64")]
fn calibrate(span: Duration) -> Option<(Instant, Tsc)> {
    // SAFETY (of each `rdtsc` below): the instruction exists on every x86-64
    // processor.
    let (t0, c0) = (Instant::now(), unsafe { core::arch::x86_64::_rdtsc() });
    let (t1, c1) = loop {
        let t = Instant::now();
        let c = unsafe { core::arch::x86_64::_rdtsc() };
        if t.duration_since(t0) >= span {
            break (t, c);
        }
        std::hint::spin_loop();
    };
    let ticks = c1.checked_sub(c0).filter(|&d| d > 0)?;
    let ns = t1.duration_since(t0).as_nanos();
    let mult = u64::try_from((ns << 32) / u128::from(ticks))
        .ok()
        .filter(|&m| m > 0)?;
    Some((t0, Tsc { start: c0, mult }))
}

/// Whether the TSC runs at a constant rate shared by all cores, as the
/// kernel says: its clock source is the TSC, or the CPU flags say the
/// counter is invariant. `SOMALLOC_TRACE_CLOCK=monotonic` says no.
#[cfg(target_arch = "x86_64")]
fn tsc_usable() -> bool {
    if std::env::var_os("SOMALLOC_TRACE_CLOCK").is_some_and(|v| v == "monotonic") {
        return false;
    }
    let source = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .unwrap_or_default();
    if source.trim() == "tsc" {
        return true;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock agrees with `Instant` (within the calibration's error and
    /// the reads' jitter) and never runs backwards.
    #[test]
    fn the_clock_follows_instant_and_never_runs_backwards() {
        let clock = Clock::start();
        let t0 = Instant::now();
        let mut last = clock.now_ns();
        while t0.elapsed() < Duration::from_millis(30) {
            let now = clock.now_ns();
            assert!(now >= last, "{now} < {last}");
            last = now;
        }
        let ours = clock.now_ns() as f64;
        let theirs = clock.start.elapsed().as_nanos() as f64;
        assert!(
            (ours - theirs).abs() < theirs * 0.01 + 50_000.0,
            "clock {ours} ns, Instant {theirs} ns (tsc {})",
            clock.uses_tsc()
        );
    }
}
