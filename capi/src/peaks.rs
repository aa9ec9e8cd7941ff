//! Resetting the peaks of the statistics (`somalloc_reset_peaks`).
