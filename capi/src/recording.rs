//! `trace:PATH`: the process's recorder, shared by every device, and its
//! end record written when the process exits.

use std::sync::{Arc, OnceLock};

use somalloc_rs::trace::{RecordOptions, Recorder};

use crate::conf::Conf;
use crate::error::{CapiError, Status};

/// The process's recorder: made with the first device state when the
/// configuration has `trace:PATH`, shared by every device, finished (its
/// end record written) when the process exits.
static RECORDER: OnceLock<Result<Option<Arc<Recorder>>, CapiError>> = OnceLock::new();

pub fn recorder(conf: &Conf) -> Result<Option<Arc<Recorder>>, CapiError> {
    RECORDER
        .get_or_init(|| {
            let Some(template) = &conf.trace else {
                return Ok(None);
            };
            let path = template.replace("%p", &std::process::id().to_string());
            let options = RecordOptions::default()
                .backtraces(conf.trace_backtraces)
                .device_times(conf.trace_device);
            let recorder = Recorder::to_file(&path, options)
                .map_err(|e| CapiError::new(Status::Config, format!("trace:{template}: {e}")))?;
            recorder.set_meta("recorded_through", "the C ABI (SOMALLOC_CONF trace)");
            // SAFETY: `finish_trace` is a plain function of this library
            // that stays loaded while it can be called (glibc runs the
            // handlers a shared library registers when it is unloaded).
            if unsafe { atexit(finish_trace) } != 0 {
                recorder.set_meta("note", "no end-of-process handler: the end record may be missing");
            }
            Ok(Some(recorder))
        })
        .clone()
}

extern "C" {
    /// The C library's end-of-process handlers (not somalloc's API: kept
    /// out of the header by cbindgen.toml).
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

/// At exit: the pools' reserved peaks of the recorded run (what a replay
/// compares with), then the trace's end record.
extern "C" fn finish_trace() {
    let Some(Ok(Some(recorder))) = RECORDER.get() else {
        return;
    };
    let mut total = 0usize;
    if let Some(g) = crate::state::made() {
        for dev in g.devices_in_use() {
            if let Ok(s) = dev.pool.stats() {
                total += s.reserved_peak;
                recorder.set_meta(
                    &format!("pool_reserved_peak.device{}", dev.device.ordinal()),
                    &s.reserved_peak.to_string(),
                );
            }
        }
    }
    recorder.set_meta("pool_reserved_peak", &total.to_string());
    // Nobody is left to tell about an error here; the file keeps what
    // was written.
    let _ = recorder.finish();
}
