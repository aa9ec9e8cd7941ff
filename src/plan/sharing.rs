//! When bytes may pass from one stream to another in a plan of several
//! streams.

/// When a block freed on one stream may take its bytes to a block of
/// another stream, in a plan of several streams ([`Plan::for_streams_sharing`](super::Plan::for_streams_sharing)).
/// The taking stream then waits for the free ([`Server::allocate_on`](super::Server::allocate_on)),
/// so that the rule decides how much memory the streams share against how
/// long a stream may wait for another; never whether the plan is sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Never: each stream's blocks have bytes of their own.
    Never,
    /// When the recorded run freed it at least this many nanoseconds
    /// before the other stream allocated, in the host's time. The device
    /// reaches a free later than the host (by as much as the host runs
    /// ahead of it), which this lag stands for.
    HostLag(u64),
    /// When the device had reached the free at least `margin_ns` before it
    /// reached the other stream's allocation, in the recorded run's device
    /// times ([`StreamOp::device_ns`](super::StreamOp::device_ns)): the wait would have cost the
    /// taking stream nothing then. Each other stream is judged on its own
    /// (in plans of up to 16 streams; beyond, a block passes to the other
    /// streams from where the last of them had passed its free). Events
    /// without device times share nothing.
    Device {
        /// Nanoseconds the free must come before the allocation by.
        margin_ns: u64,
    },
}

/// [`Sharing::Device`] keeps a block's lifetime for each other stream of
/// plans of up to this many streams; plans of more streams keep one for
/// all of them (the latest), which shares less.
pub(super) const PER_STREAM_MAX: usize = 16;

/// The margin of [`Sharing::Device`] when none is given: 15 ms. A served
/// run keeps the recorded one's pace only roughly (a quicker host starts
/// the next stream's work sooner, the streams' kernels meet otherwise on
/// the device); on the models benchmark's two-stream mix (H200) the waits
/// of a 5 ms margin held their streams 1.2 to 3.2 ms a step in all, those
/// of 15 ms 0.3 to 0.5 ms, for 1.1 to 1.2 × the memory.
pub const DEVICE_MARGIN_NS: u64 = 15_000_000;

impl Sharing {
    /// Reads a sharing rule from text (the C ABI's `plan_share`, the
    /// trace tool's `--share`): `off` ([`Never`](Sharing::Never)),
    /// milliseconds ([`HostLag`](Sharing::HostLag)), `device`
    /// ([`Device`](Sharing::Device) with a margin of [`DEVICE_MARGIN_NS`])
    /// or `device+MS` (a margin of MS milliseconds). Milliseconds go from 0
    /// to 10000, fractions allowed.
    ///
    /// ```
    /// use somalloc::plan::Sharing;
    /// assert_eq!(Sharing::parse("10"), Ok(Sharing::HostLag(10_000_000)));
    /// assert_eq!(Sharing::parse("device+0.5"), Ok(Sharing::Device { margin_ns: 500_000 }));
    /// assert!(Sharing::parse("device+soon").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Sharing, String> {
        let ms = |v: &str| {
            match v.trim().parse::<f64>() {
            Ok(ms) if (0.0..=10_000.0).contains(&ms) => Ok((ms * 1e6).round() as u64),
            _ => Err(format!(
                "expected off, milliseconds from 0 to 10000, device or device+MS (e.g. 10 or device+0.5), not `{text}`"
            )),
        }
        };
        match text.trim() {
            "off" | "false" | "False" => Ok(Sharing::Never),
            "device" => Ok(Sharing::Device {
                margin_ns: DEVICE_MARGIN_NS,
            }),
            t => match t.strip_prefix("device+") {
                Some(m) => Ok(Sharing::Device { margin_ns: ms(m)? }),
                None => Ok(Sharing::HostLag(ms(t)?)),
            },
        }
    }

    /// Whether the rule reads device times.
    pub fn needs_device_times(self) -> bool {
        matches!(self, Sharing::Device { .. })
    }
}

impl std::fmt::Display for Sharing {
    /// The text [`Sharing::parse`] reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        match *self {
            Sharing::Never => f.write_str("off"),
            Sharing::HostLag(ns) => write!(f, "{}", ms(ns)),
            Sharing::Device { margin_ns } => write!(f, "device+{}", ms(margin_ns)),
        }
    }
}
