//! The conformance suite: vendor-blind, the same files run on every backend.
//!
//! Every test that needs a GPU starts with `common::setup`, which prints one
//! `SKIP` line and returns `None` when there is no runtime or no device.
//! Every GPU test allocates from a pool of its own and ends by checking that
//! the pool's used bytes are back to where they began.

mod common;

mod bad_input;
mod cache;
mod cross_stream;
mod device;
mod peer;
mod plan;
mod pool;
mod sizes;
mod stream_order;
mod threads;
mod views;
