//! The one body of what the CUDA and HIP backends do alike.
//!
//! The two runtimes have the same calls under two prefixes (`cudaMallocAsync`
//! / `hipMallocAsync`), the same argument order and, for everything shared
//! here, the same numbers (checked by the `const` assertions the macro emits).
//! So each backend states only its name table and what really differs
//! (device names, the capture queries, module loading and launches):
//! [`shared_runtime_api!`] declares the functions both runtimes have under
//! the vendor's prefix (`concat!("hip", "MallocAsync\0")`), and
//! [`backend_impl!`] writes the rest: the `impl Backend` (and, with the
//! `kernels` feature, `impl TestSupport`), the error-text type,
//! `check`/`check_alloc`, the current-device hooks.
//!
//! Why one file and not several: a `macro_rules!` body cannot be split
//! across files, and splitting it into several macros (pools, streams,
//! graphs, errors) would make each take the same long list of vendor types
//! and names and call the others, for no gain to a reader: the `impl
//! Backend` it writes must be one `impl` block. The body is ordered by
//! concern instead, each part under a `// ---- ... ----` line naming it:
//! (after the symbol table of `shared_runtime_api!`) errors and codes,
//! devices and the runtime, streams and events, pools, peer access and IPC,
//! allocation in stream order, capture and graphs, virtual memory (which
//! only forwards to the vendor's `vmm.rs`: the two APIs differ too much to
//! share a body), the test support.

/// Declares (through `runtime_api!`) the functions both runtimes have, under
/// `prefix`, with the vendor's handle and struct types, followed by the
/// vendor's own `required` and `optional` declarations. `since` names, for
/// each group of calls an older runtime may lack, the first release that has
/// it. (ci/hip-on-cuda reads the `concat!($p, "...\0")` names here.)
macro_rules! shared_runtime_api {
    (
        prefix: $p:literal, version: $v:ident,
        stream: $s:ty, event: $e:ty, pool: $pool:ty, graph: $g:ty, exec: $x:ty, user_object: $u:ty,
        host_fn: $host_fn:ty, location: $loc:ty, access_desc: $desc:ty, pool_props: $props:ty,
        since: {
            graph_upload: $upload_since:literal $(if $upload_if:expr)?,
            graph_memory: $mem_since:literal $(if $mem_if:expr)?,
            user_objects: $uo_since:literal $(if $uo_if:expr)?
        },
        required { $($required:tt)* }
        optional { $($optional:tt)* }
    ) => {
        crate::common::runtime_api! {
            version: $v;
            fn get_error_name = concat!($p, "GetErrorName\0"); (i32) -> *const std::ffi::c_char;
            fn get_error_string = concat!($p, "GetErrorString\0"); (i32) -> *const std::ffi::c_char;
            fn get_device_count = concat!($p, "GetDeviceCount\0"); (*mut std::ffi::c_int) -> i32;
            fn set_device = concat!($p, "SetDevice\0"); (std::ffi::c_int) -> i32;
            fn get_device = concat!($p, "GetDevice\0"); (*mut std::ffi::c_int) -> i32;
            fn device_get_attribute = concat!($p, "DeviceGetAttribute\0"); (
                *mut std::ffi::c_int, std::ffi::c_int, std::ffi::c_int,
            ) -> i32;
            fn mem_get_info = concat!($p, "MemGetInfo\0"); (*mut usize, *mut usize) -> i32;
            fn stream_create_with_flags = concat!($p, "StreamCreateWithFlags\0"); (*mut $s, std::ffi::c_uint) -> i32;
            fn stream_destroy = concat!($p, "StreamDestroy\0"); ($s) -> i32;
            fn stream_synchronize = concat!($p, "StreamSynchronize\0"); ($s) -> i32;
            fn stream_wait_event = concat!($p, "StreamWaitEvent\0"); ($s, $e, std::ffi::c_uint) -> i32;
            fn event_create_with_flags = concat!($p, "EventCreateWithFlags\0"); (*mut $e, std::ffi::c_uint) -> i32;
            fn event_destroy = concat!($p, "EventDestroy\0"); ($e) -> i32;
            fn event_record = concat!($p, "EventRecord\0"); ($e, $s) -> i32;
            fn event_synchronize = concat!($p, "EventSynchronize\0"); ($e) -> i32;
            fn event_query = concat!($p, "EventQuery\0"); ($e) -> i32;
            fn peek_at_last_error = concat!($p, "PeekAtLastError\0"); () -> i32;
            fn get_last_error = concat!($p, "GetLastError\0"); () -> i32;
            fn event_elapsed_time = concat!($p, "EventElapsedTime\0"); (*mut f32, $e, $e) -> i32;
            fn device_get_default_mem_pool = concat!($p, "DeviceGetDefaultMemPool\0"); (*mut $pool, std::ffi::c_int) -> i32;
            fn device_get_mem_pool = concat!($p, "DeviceGetMemPool\0"); (*mut $pool, std::ffi::c_int) -> i32;
            fn device_set_mem_pool = concat!($p, "DeviceSetMemPool\0"); (std::ffi::c_int, $pool) -> i32;
            fn mem_pool_create = concat!($p, "MemPoolCreate\0"); (*mut $pool, *const $props) -> i32;
            fn mem_pool_destroy = concat!($p, "MemPoolDestroy\0"); ($pool) -> i32;
            // Attribute ids are C enums (`int`); the value is an `int` or a
            // 64-bit integer depending on the attribute.
            fn mem_pool_set_attribute = concat!($p, "MemPoolSetAttribute\0"); (
                $pool, std::ffi::c_int, *mut std::ffi::c_void,
            ) -> i32;
            fn mem_pool_get_attribute = concat!($p, "MemPoolGetAttribute\0"); (
                $pool, std::ffi::c_int, *mut std::ffi::c_void,
            ) -> i32;
            fn mem_pool_trim_to = concat!($p, "MemPoolTrimTo\0"); ($pool, usize) -> i32;
            fn device_can_access_peer = concat!($p, "DeviceCanAccessPeer\0"); (
                *mut std::ffi::c_int, std::ffi::c_int, std::ffi::c_int,
            ) -> i32;
            fn mem_pool_set_access = concat!($p, "MemPoolSetAccess\0"); ($pool, *const $desc, usize) -> i32;
            // The flags out-parameter is written by the runtime: a plain
            // integer, so an unexpected value is data, not an invalid enum.
            fn mem_pool_get_access = concat!($p, "MemPoolGetAccess\0"); (*mut u32, $pool, *mut $loc) -> i32;
            // Handle types are a bit mask (`unsigned`).
            fn mem_pool_export_to_shareable_handle = concat!($p, "MemPoolExportToShareableHandle\0"); (
                *mut std::ffi::c_void, $pool, u32, std::ffi::c_uint,
            ) -> i32;
            fn mem_pool_import_from_shareable_handle = concat!($p, "MemPoolImportFromShareableHandle\0"); (
                *mut $pool, *mut std::ffi::c_void, u32, std::ffi::c_uint,
            ) -> i32;
            // The export data is 64 opaque bytes in both.
            fn mem_pool_export_pointer = concat!($p, "MemPoolExportPointer\0"); (*mut [u8; 64], *mut std::ffi::c_void) -> i32;
            fn mem_pool_import_pointer = concat!($p, "MemPoolImportPointer\0"); (
                *mut *mut std::ffi::c_void, $pool, *mut [u8; 64],
            ) -> i32;
            fn malloc_async = concat!($p, "MallocAsync\0"); (*mut *mut std::ffi::c_void, usize, $s) -> i32;
            fn malloc_from_pool_async = concat!($p, "MallocFromPoolAsync\0"); (
                *mut *mut std::ffi::c_void, usize, $pool, $s,
            ) -> i32;
            fn free_async = concat!($p, "FreeAsync\0"); (*mut std::ffi::c_void, $s) -> i32;
            fn malloc = concat!($p, "Malloc\0"); (*mut *mut std::ffi::c_void, usize) -> i32;
            fn free = concat!($p, "Free\0"); (*mut std::ffi::c_void) -> i32;
            // The copy kind is a C enum (`int`).
            fn memcpy_async = concat!($p, "MemcpyAsync\0"); (
                *mut std::ffi::c_void, *const std::ffi::c_void, usize, std::ffi::c_int, $s,
            ) -> i32;
            fn memset_async = concat!($p, "MemsetAsync\0"); (*mut std::ffi::c_void, std::ffi::c_int, usize, $s) -> i32;
            // Capture status and mode are C enums (`int`); the status is
            // written by the runtime and read as an integer.
            fn stream_is_capturing = concat!($p, "StreamIsCapturing\0"); ($s, *mut std::ffi::c_int) -> i32;
            fn stream_begin_capture = concat!($p, "StreamBeginCapture\0"); ($s, std::ffi::c_int) -> i32;
            fn stream_end_capture = concat!($p, "StreamEndCapture\0"); ($s, *mut $g) -> i32;
            fn graph_destroy = concat!($p, "GraphDestroy\0"); ($g) -> i32;
            fn graph_instantiate_with_flags = concat!($p, "GraphInstantiateWithFlags\0"); (*mut $x, $g, u64) -> i32;
            fn graph_exec_destroy = concat!($p, "GraphExecDestroy\0"); ($x) -> i32;
            fn graph_launch = concat!($p, "GraphLaunch\0"); ($x, $s) -> i32;
            $($required)*
            optional(since $upload_since $(, if $upload_if)?) fn graph_upload = concat!($p, "GraphUpload\0"); ($x, $s) -> i32;
            optional(since $mem_since $(, if $mem_if)?) fn device_get_graph_mem_attribute = concat!($p, "DeviceGetGraphMemAttribute\0"); (
                std::ffi::c_int, std::ffi::c_int, *mut std::ffi::c_void,
            ) -> i32;
            optional(since $mem_since $(, if $mem_if)?) fn device_graph_mem_trim = concat!($p, "DeviceGraphMemTrim\0"); (std::ffi::c_int) -> i32;
            optional(since $uo_since $(, if $uo_if)?) fn user_object_create = concat!($p, "UserObjectCreate\0"); (
                *mut $u, *mut std::ffi::c_void, $host_fn, std::ffi::c_uint, std::ffi::c_uint,
            ) -> i32;
            optional(since $uo_since $(, if $uo_if)?) fn graph_retain_user_object = concat!($p, "GraphRetainUserObject\0"); (
                $g, $u, std::ffi::c_uint, std::ffi::c_uint,
            ) -> i32;
            $($optional)*
        }
    };
}
pub(crate) use shared_runtime_api;

/// Writes the shared part of a backend.
///
/// ```text
/// backend_impl! {
///     backend: Cuda, codes: CudaCodes, prefix: "cuda",
///     stream: CudaStream = sys::cudaStream_t, ...        // handle = raw type
///     mem_pool_props: sys::cudaMemPoolProps, ...        // structs and constants
///     specific { fn device_name(..) { .. } ... }         // the vendor's own fns
///     test_support { fn module_load(..) { .. } ... }     // the same, for the test kit
/// }
/// ```
///
/// The module that invokes it provides: `sys`, `Api` and `fn api()` (from
/// `runtime_api!`, with the field names used below), `BACKEND`,
/// `fn version_text(i32) -> String`, `fn unsupported(..) -> Error`, and the
/// vendor hooks `refuse_zero_bytes(bytes, what)`,
/// `refuse_alloc_in_capture(api, call, stream)`, `free_is_noop(ptr)`,
/// `pool_max_size_supported(version)` with `POOL_MAX_SIZE_SINCE`,
/// `refuse_pool_placement(version, props)` (the locations and allocation
/// types the runtime's pools take), and a module `vmm` with the
/// virtual-memory calls (`support`, `quirks`, `reserve`, `free_reservation`,
/// `create`, `release`, `map`, `set_access`, `unmap`, `retain`, `export_fd`,
/// `import_fd`, the trait's `vmm_*` without the prefix).
macro_rules! backend_impl {
    (
        backend: $backend:ident, codes: $codes:ident, prefix: $p:literal,
        stream: $stream:ident = $raw_stream:ty,
        event: $event:ident = $raw_event:ty,
        pool: $pool:ident = $raw_pool:ty,
        module: $module:ident,
        function: $function:ident,
        graph: $graph:ident = $raw_graph:ty,
        exec: $exec:ident = $raw_exec:ty,
        user_object: $raw_user_object:ty,
        mem_location: $location:path,
        mem_access_desc: $access_desc:path,
        mem_pool_props: $props:path,
        constants: {
            success: $success:path,
            out_of_memory: $oom:path,
            insufficient_driver: $insufficient_driver:path,
            no_device: $no_device:path,
            not_supported: $not_supported:path,
            stream_non_blocking: $non_blocking:path,
            event_disable_timing: $disable_timing:path,
            pools_supported: $pools_supported:path,
            memcpy_default: $memcpy_default:path,
            location_device: $location_device:path,
            alloc_pinned: $pinned:path,
            handle_none: $handle_none:path,
            handle_fd: $handle_fd:path,
            pool_attrs: [$($pool_attr:path),* $(,)?],
            capture_status: [$($capture_status:path),* $(,)?],
            capture_mode: [$($capture_mode:path),* $(,)?],
            graph_mem_attrs: [$($graph_mem_attr:path),* $(,)?],
            auto_free_on_launch: $auto_free:path,
            user_object_no_sync: $no_sync:path,
            user_object_move: $move_ref:path $(,)?
        },
        specific { $($specific:tt)* }
        test_support { $($test_support:tt)* }
    ) => {
        // ---- Errors and codes ----
        // The codes with their own `Error` variant and every shared enum
        // value, as `common` numbers them.
        const _: () = {
            use crate::common as c;
            assert!($success == c::SUCCESS);
            assert!($oom == c::ERROR_OUT_OF_MEMORY);
            assert!($insufficient_driver == c::ERROR_INSUFFICIENT_DRIVER);
            assert!($no_device == c::ERROR_NO_DEVICE);
            assert!($not_supported == c::ERROR_NOT_SUPPORTED);
            let pool_attrs = [$($pool_attr),*];
            let mut i = 0;
            while i < pool_attrs.len() {
                assert!(pool_attrs[i] == c::POOL_ATTRS[i]);
                i += 1;
            }
            assert!(pool_attrs.len() == c::POOL_ATTRS.len());
            assert!($location_device == c::LOCATION_DEVICE);
            assert!($pinned == c::ALLOC_PINNED);
            assert!(matches!([$($capture_status),*], [c::CAPTURE_STATUS_NONE, c::CAPTURE_STATUS_ACTIVE, c::CAPTURE_STATUS_INVALIDATED]));
            assert!(matches!([$($capture_mode),*], [c::CAPTURE_MODE_GLOBAL, c::CAPTURE_MODE_THREAD_LOCAL, c::CAPTURE_MODE_RELAXED]));
            assert!(matches!(
                [$($graph_mem_attr),*],
                [c::GRAPH_MEM_USED_CURRENT, c::GRAPH_MEM_USED_HIGH, c::GRAPH_MEM_RESERVED_CURRENT, c::GRAPH_MEM_RESERVED_HIGH]
            ));
        };

        /// Error texts and version names of this runtime.
        struct $codes;

        impl crate::common::Codes for $codes {
            const BACKEND: crate::Vendor = BACKEND;

            fn version_text(version: i32) -> String {
                version_text(version)
            }

            fn texts(code: i32) -> (String, String) {
                use crate::common::c_str;
                match api() {
                    // SAFETY: both functions accept any code and return a
                    // static string (a generic one for codes they do not know).
                    Ok(a) => unsafe { (c_str((a.get_error_name)(code)), c_str((a.get_error_string)(code))) },
                    Err(_) => (String::new(), String::new()),
                }
            }
        }

        #[inline]
        fn check(call: &'static str, code: i32) -> crate::error::Result<()> {
            crate::common::check::<$codes>(call, code)
        }

        /// After a query answered `NotReady` (work pending, not a failure):
        /// takes that answer back out of the thread's last error, where a
        /// runtime may have left it and where a caller checking its own
        /// launches (`cudaGetLastError` after a kernel, as PyTorch does)
        /// would read it as a failure. Only a `NotReady` is taken: any other
        /// last error stays for its owner (see `common.rs`).
        fn forget_not_ready(api: &Api) {
            // SAFETY: neither call takes arguments; both only read or reset
            // the calling thread's last error.
            unsafe {
                if (api.peek_at_last_error)() == crate::common::NOT_READY {
                    (api.get_last_error)();
                }
            }
        }

        #[inline]
        fn check_alloc(call: &'static str, code: i32, bytes: usize) -> crate::error::Result<()> {
            crate::common::check_alloc::<$codes>(call, code, bytes)
        }

        /// The vendor's structs under the names the shared body uses.
        type MemLocation = $location;
        type MemAccessDesc = $access_desc;

        fn device_location(device: usize) -> crate::error::Result<MemLocation> {
            Ok(MemLocation {
                type_: $location_device,
                id: crate::common::ordinal(device)?,
            })
        }

        impl crate::common::CurrentDevice for $backend {
            fn current() -> crate::error::Result<std::ffi::c_int> {
                let mut device: std::ffi::c_int = 0;
                // SAFETY: valid out-pointer.
                check(concat!($p, "GetDevice"), unsafe { (api()?.get_device)(&mut device) })?;
                Ok(device)
            }

            fn make_current(device: std::ffi::c_int) -> crate::error::Result<()> {
                // SAFETY: plain value argument.
                check(concat!($p, "SetDevice"), unsafe { (api()?.set_device)(device) })
            }
        }

        impl crate::backend::Backend for $backend {
            type Stream = $stream;
            type Event = $event;
            type Pool = $pool;
            type Graph = $graph;
            type GraphExec = $exec;

            $($specific)*

            // ---- Devices and the runtime ----
            fn init() -> crate::error::Result<()> {
                api().map(|_| ())
            }

            fn runtime_version() -> crate::error::Result<i32> {
                // What the runtime reported when it was loaded.
                Ok(api()?.version)
            }

            fn device_count() -> crate::error::Result<usize> {
                let mut n: std::ffi::c_int = 0;
                // SAFETY: valid out-pointer.
                check(concat!($p, "GetDeviceCount"), unsafe { (api()?.get_device_count)(&mut n) })?;
                Ok(usize::try_from(n).unwrap_or(0))
            }

            fn set_device(device: usize) -> crate::error::Result<()> {
                <Self as crate::common::CurrentDevice>::make_current(crate::common::ordinal(device)?)
            }

            fn mem_info(device: usize) -> crate::error::Result<(usize, usize)> {
                let _device = crate::common::DeviceGuard::<Self>::set(device)?;
                let (mut free, mut total) = (0usize, 0usize);
                // SAFETY: valid out-pointers.
                check(concat!($p, "MemGetInfo"), unsafe { (api()?.mem_get_info)(&mut free, &mut total) })?;
                Ok((free, total))
            }

            fn pools_supported(device: usize) -> crate::error::Result<bool> {
                let mut v: std::ffi::c_int = 0;
                // SAFETY: valid out-pointer; the attribute is a value of the
                // enum.
                check(concat!($p, "DeviceGetAttribute"), unsafe {
                    (api()?.device_get_attribute)(&mut v, $pools_supported, crate::common::ordinal(device)?)
                })?;
                Ok(v != 0)
            }

            // ---- Streams and events ----
            fn stream_create(device: usize) -> crate::error::Result<$stream> {
                let _device = crate::common::DeviceGuard::<Self>::set(device)?;
                let mut s: $raw_stream = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the flag is a documented constant.
                check(concat!($p, "StreamCreateWithFlags"), unsafe {
                    (api()?.stream_create_with_flags)(&mut s, $non_blocking)
                })?;
                Ok($stream(s))
            }

            fn stream_destroy(stream: $stream) -> crate::error::Result<()> {
                // SAFETY: the caller owns the stream and destroys it once.
                check(concat!($p, "StreamDestroy"), unsafe { (api()?.stream_destroy)(stream.0) })
            }

            fn stream_synchronize(stream: $stream) -> crate::error::Result<()> {
                // SAFETY: the runtime validates the handle.
                check(concat!($p, "StreamSynchronize"), unsafe { (api()?.stream_synchronize)(stream.0) })
            }

            fn stream_wait_event(stream: $stream, event: $event) -> crate::error::Result<()> {
                // SAFETY: handles made by this backend; flags 0.
                check(concat!($p, "StreamWaitEvent"), unsafe {
                    (api()?.stream_wait_event)(stream.0, event.0, 0)
                })
            }

            fn stream_from_raw(raw: *mut std::ffi::c_void) -> $stream {
                $stream(raw.cast())
            }

            fn stream_as_raw(stream: $stream) -> *mut std::ffi::c_void {
                stream.0.cast()
            }

            fn event_create(device: usize, timing: bool) -> crate::error::Result<$event> {
                let _device = crate::common::DeviceGuard::<Self>::set(device)?;
                let flags = if timing { 0 } else { $disable_timing };
                let mut e: $raw_event = std::ptr::null_mut();
                // SAFETY: valid out-pointer; documented flags.
                check(concat!($p, "EventCreateWithFlags"), unsafe {
                    (api()?.event_create_with_flags)(&mut e, flags)
                })?;
                Ok($event(e))
            }

            fn event_destroy(event: $event) -> crate::error::Result<()> {
                // SAFETY: the caller owns the event and destroys it once.
                check(concat!($p, "EventDestroy"), unsafe { (api()?.event_destroy)(event.0) })
            }

            fn event_record(event: $event, stream: $stream) -> crate::error::Result<()> {
                // SAFETY: handles made by this backend.
                check(concat!($p, "EventRecord"), unsafe { (api()?.event_record)(event.0, stream.0) })
            }

            fn event_synchronize(event: $event) -> crate::error::Result<()> {
                // SAFETY: handle made by this backend.
                check(concat!($p, "EventSynchronize"), unsafe { (api()?.event_synchronize)(event.0) })
            }

            fn event_query(event: $event) -> crate::error::Result<bool> {
                let api = api()?;
                // SAFETY: handle made by this backend.
                match unsafe { (api.event_query)(event.0) } {
                    crate::common::SUCCESS => Ok(true),
                    crate::common::NOT_READY => {
                        forget_not_ready(api);
                        Ok(false)
                    }
                    code => check(concat!($p, "EventQuery"), code).map(|()| true),
                }
            }

            fn event_elapsed_ms(start: $event, end: $event) -> crate::error::Result<f32> {
                let api = api()?;
                let mut ms = 0f32;
                // SAFETY: valid out-pointer; handles made by this backend.
                let code = unsafe { (api.event_elapsed_time)(&mut ms, start.0, end.0) };
                if code == crate::common::NOT_READY {
                    forget_not_ready(api);
                }
                check(concat!($p, "EventElapsedTime"), code)?;
                Ok(ms)
            }

            fn event_as_raw(event: $event) -> *mut std::ffi::c_void {
                event.0.cast()
            }

            #[cfg(test)]
            fn event_from_raw(raw: *mut std::ffi::c_void) -> $event {
                $event(raw.cast())
            }

            // ---- Pools: the default and current pool, creation, attributes, trimming ----
            fn default_pool(device: usize) -> crate::error::Result<$pool> {
                let mut p: $raw_pool = std::ptr::null_mut();
                // SAFETY: valid out-pointer.
                check(concat!($p, "DeviceGetDefaultMemPool"), unsafe {
                    (api()?.device_get_default_mem_pool)(&mut p, crate::common::ordinal(device)?)
                })?;
                Ok($pool(p))
            }

            fn current_pool(device: usize) -> crate::error::Result<$pool> {
                let mut p: $raw_pool = std::ptr::null_mut();
                // SAFETY: valid out-pointer.
                check(concat!($p, "DeviceGetMemPool"), unsafe {
                    (api()?.device_get_mem_pool)(&mut p, crate::common::ordinal(device)?)
                })?;
                Ok($pool(p))
            }

            fn set_current_pool(device: usize, pool: $pool) -> crate::error::Result<()> {
                // SAFETY: pool handle made by this backend.
                check(concat!($p, "DeviceSetMemPool"), unsafe {
                    (api()?.device_set_mem_pool)(crate::common::ordinal(device)?, pool.0)
                })
            }

            fn pool_create(props: &crate::backend::RawPoolProps) -> crate::error::Result<$pool> {
                let handle_types = match props.handle_types {
                    0 => $handle_none,
                    1 => $handle_fd,
                    other => return Err(unsupported(format!("export handle type mask {other:#x}"))),
                };
                let api = api()?;
                // The vendor's rules for locations and allocation types
                // (backends/<vendor>/mod.rs).
                refuse_pool_placement(api.version, props)?;
                let mut p = <$props>::zeroed();
                p.allocType = crate::common::alloc_type(props.alloc);
                p.handleTypes = handle_types;
                (p.location.type_, p.location.id) = crate::common::location_parts(props.location);
                if props.max_size != 0 {
                    if !pool_max_size_supported(api.version) {
                        return Err(unsupported(format!(
                            "a pool max_size needs {POOL_MAX_SIZE_SINCE} or later (the loaded runtime is {})",
                            version_text(api.version)
                        )));
                    }
                    p.maxSize = props.max_size;
                }
                let mut pool: $raw_pool = std::ptr::null_mut();
                // SAFETY: valid out-pointer and a fully initialised props
                // struct of the headers' layout (maxSize stays 0, i.e.
                // reserved, on runtimes that do not read it).
                check(concat!($p, "MemPoolCreate"), unsafe { (api.mem_pool_create)(&mut pool, &p) })?;
                Ok($pool(pool))
            }

            fn pool_destroy(pool: $pool) -> crate::error::Result<()> {
                // SAFETY: the caller owns the pool and destroys it once;
                // allocations still outstanding keep the pool's memory alive
                // inside the runtime.
                check(concat!($p, "MemPoolDestroy"), unsafe { (api()?.mem_pool_destroy)(pool.0) })
            }

            fn pool_get(pool: $pool, a: crate::backend::PoolAttr) -> crate::error::Result<u64> {
                let api = api()?;
                let attr = crate::common::pool_attr(a);
                if a.is_flag() {
                    let mut v: std::ffi::c_int = 0;
                    // SAFETY: flag attributes are `int`.
                    check(concat!($p, "MemPoolGetAttribute"), unsafe {
                        (api.mem_pool_get_attribute)(pool.0, attr, (&mut v as *mut std::ffi::c_int).cast())
                    })?;
                    Ok(u64::from(v != 0))
                } else {
                    let mut v: u64 = 0;
                    // SAFETY: the other attributes are 64-bit.
                    check(concat!($p, "MemPoolGetAttribute"), unsafe {
                        (api.mem_pool_get_attribute)(pool.0, attr, (&mut v as *mut u64).cast())
                    })?;
                    Ok(v)
                }
            }

            fn pool_set(pool: $pool, a: crate::backend::PoolAttr, value: u64) -> crate::error::Result<()> {
                let api = api()?;
                let attr = crate::common::pool_attr(a);
                if a.is_flag() {
                    let mut v = std::ffi::c_int::from(value != 0);
                    // SAFETY: flag attributes are `int`.
                    check(concat!($p, "MemPoolSetAttribute"), unsafe {
                        (api.mem_pool_set_attribute)(pool.0, attr, (&mut v as *mut std::ffi::c_int).cast())
                    })
                } else {
                    let mut v: u64 = value;
                    // SAFETY: the other attributes are 64-bit.
                    check(concat!($p, "MemPoolSetAttribute"), unsafe {
                        (api.mem_pool_set_attribute)(pool.0, attr, (&mut v as *mut u64).cast())
                    })
                }
            }

            fn pool_trim_to(pool: $pool, keep_bytes: usize) -> crate::error::Result<()> {
                // SAFETY: pool handle made by this backend.
                check(concat!($p, "MemPoolTrimTo"), unsafe { (api()?.mem_pool_trim_to)(pool.0, keep_bytes) })
            }

            fn pool_as_raw(pool: $pool) -> *mut std::ffi::c_void {
                pool.0.cast()
            }

            // ---- Peer access and IPC ----
            fn can_access_peer(device: usize, peer: usize) -> crate::error::Result<bool> {
                let mut v: std::ffi::c_int = 0;
                // SAFETY: valid out-pointer.
                check(concat!($p, "DeviceCanAccessPeer"), unsafe {
                    (api()?.device_can_access_peer)(
                        &mut v,
                        crate::common::ordinal(device)?,
                        crate::common::ordinal(peer)?,
                    )
                })?;
                Ok(v != 0)
            }

            fn pool_set_access(pool: $pool, device: usize, access: u32) -> crate::error::Result<()> {
                let desc = MemAccessDesc {
                    location: device_location(device)?,
                    flags: access,
                };
                // SAFETY: one valid descriptor; the runtime validates the values.
                check(concat!($p, "MemPoolSetAccess"), unsafe { (api()?.mem_pool_set_access)(pool.0, &desc, 1) })
            }

            fn pool_get_access(pool: $pool, device: usize) -> crate::error::Result<u32> {
                let mut location = device_location(device)?;
                let mut flags = 0u32;
                // SAFETY: valid out-pointer and location.
                check(concat!($p, "MemPoolGetAccess"), unsafe {
                    (api()?.mem_pool_get_access)(&mut flags, pool.0, &mut location)
                })?;
                Ok(flags)
            }

            fn pool_export_fd(pool: $pool) -> crate::error::Result<i32> {
                let mut fd: std::ffi::c_int = -1;
                // SAFETY: for the POSIX fd handle type the runtime writes an int.
                check(concat!($p, "MemPoolExportToShareableHandle"), unsafe {
                    (api()?.mem_pool_export_to_shareable_handle)(
                        (&mut fd as *mut std::ffi::c_int).cast(),
                        pool.0,
                        $handle_fd,
                        0,
                    )
                })?;
                Ok(fd)
            }

            fn pool_import_fd(fd: i32) -> crate::error::Result<$pool> {
                let mut pool: $raw_pool = std::ptr::null_mut();
                // SAFETY: for the POSIX fd handle type the handle argument is
                // the descriptor's value itself; the runtime does not take
                // ownership.
                check(concat!($p, "MemPoolImportFromShareableHandle"), unsafe {
                    (api()?.mem_pool_import_from_shareable_handle)(
                        &mut pool,
                        fd as isize as *mut std::ffi::c_void,
                        $handle_fd,
                        0,
                    )
                })?;
                Ok($pool(pool))
            }

            fn pool_export_pointer(ptr: crate::backend::DevicePtr) -> crate::error::Result<[u8; 64]> {
                let mut data = [0u8; 64];
                // SAFETY: 64 writable bytes (the export data struct); the
                // runtime validates the address.
                check(concat!($p, "MemPoolExportPointer"), unsafe {
                    (api()?.mem_pool_export_pointer)(&mut data, ptr.as_mut_ptr())
                })?;
                Ok(data)
            }

            fn pool_import_pointer(pool: $pool, data: &[u8; 64]) -> crate::error::Result<crate::backend::DevicePtr> {
                let mut copy = *data;
                let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the runtime only reads the 64 bytes.
                check(concat!($p, "MemPoolImportPointer"), unsafe {
                    (api()?.mem_pool_import_pointer)(&mut p, pool.0, &mut copy)
                })?;
                Ok(crate::backend::DevicePtr(p as usize))
            }

            // ---- Allocation, free, copies and fills in stream order ----
            #[inline]
            fn malloc_async(bytes: usize, stream: $stream) -> crate::error::Result<crate::backend::DevicePtr> {
                refuse_zero_bytes(bytes, "a stream-ordered allocation of 0 bytes")?;
                let api = api()?;
                refuse_alloc_in_capture(api, concat!($p, "MallocAsync"), stream)?;
                let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the runtime validates the stream.
                let code = unsafe { (api.malloc_async)(&mut p, bytes, stream.0) };
                check_alloc(concat!($p, "MallocAsync"), code, bytes)?;
                Ok(crate::backend::DevicePtr(p as usize))
            }

            #[inline]
            fn malloc_from_pool_async(
                bytes: usize,
                pool: $pool,
                stream: $stream,
            ) -> crate::error::Result<crate::backend::DevicePtr> {
                refuse_zero_bytes(bytes, "a stream-ordered allocation of 0 bytes")?;
                let api = api()?;
                refuse_alloc_in_capture(api, concat!($p, "MallocFromPoolAsync"), stream)?;
                let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the runtime validates pool and stream.
                let code = unsafe { (api.malloc_from_pool_async)(&mut p, bytes, pool.0, stream.0) };
                check_alloc(concat!($p, "MallocFromPoolAsync"), code, bytes)?;
                Ok(crate::backend::DevicePtr(p as usize))
            }

            #[inline]
            unsafe fn free_async(ptr: crate::backend::DevicePtr, stream: $stream) -> crate::error::Result<()> {
                if free_is_noop(ptr) {
                    return Ok(());
                }
                let api = api()?;
                refuse_alloc_in_capture(api, concat!($p, "FreeAsync"), stream)?;
                // SAFETY: the caller guarantees `ptr` is a live stream-ordered
                // allocation that nothing uses after this point in stream order.
                check(concat!($p, "FreeAsync"), unsafe { (api.free_async)(ptr.as_mut_ptr(), stream.0) })
            }

            unsafe fn copy_async(
                dst: *mut std::ffi::c_void,
                src: *const std::ffi::c_void,
                bytes: usize,
                stream: $stream,
            ) -> crate::error::Result<()> {
                // SAFETY: the caller guarantees both ranges (see the trait);
                // the default kind lets the runtime infer the direction.
                check(concat!($p, "MemcpyAsync"), unsafe {
                    (api()?.memcpy_async)(dst, src, bytes, $memcpy_default, stream.0)
                })
            }

            unsafe fn memset_async(
                dst: crate::backend::DevicePtr,
                value: u8,
                bytes: usize,
                stream: $stream,
            ) -> crate::error::Result<()> {
                // SAFETY: the caller guarantees the range (see the trait).
                check(concat!($p, "MemsetAsync"), unsafe {
                    (api()?.memset_async)(dst.as_mut_ptr(), std::ffi::c_int::from(value), bytes, stream.0)
                })
            }

            // ---- Capture and graphs ----
            fn stream_begin_capture(stream: $stream, mode: crate::backend::RawCaptureMode) -> crate::error::Result<()> {
                // SAFETY: the runtime validates the stream; the mode is one
                // of the three enum values.
                check(concat!($p, "StreamBeginCapture"), unsafe {
                    (api()?.stream_begin_capture)(stream.0, crate::common::capture_mode(mode))
                })
            }

            fn stream_end_capture(stream: $stream) -> crate::error::Result<$graph> {
                let api = api()?;
                let mut graph: $raw_graph = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the runtime validates the stream.
                let code = unsafe { (api.stream_end_capture)(stream.0, &mut graph) };
                if code != crate::common::SUCCESS {
                    // An invalidated capture ends too (901, no graph). Should
                    // a runtime still hand one out with the error, it is not
                    // leaked.
                    if !graph.is_null() {
                        // SAFETY: the graph came from the runtime just now
                        // and is owned by nobody else.
                        unsafe { (api.graph_destroy)(graph) };
                    }
                    return Err(crate::common::vendor::<$codes>(concat!($p, "StreamEndCapture"), code));
                }
                Ok($graph(graph))
            }

            fn graph_destroy(graph: $graph) -> crate::error::Result<()> {
                // SAFETY: the caller owns the graph and destroys it once.
                check(concat!($p, "GraphDestroy"), unsafe { (api()?.graph_destroy)(graph.0) })
            }

            fn graph_instantiate(graph: $graph, auto_free_on_launch: bool) -> crate::error::Result<$exec> {
                let flags = if auto_free_on_launch { $auto_free } else { 0 };
                let mut exec: $raw_exec = std::ptr::null_mut();
                // SAFETY: valid out-pointer; a graph made by this backend; a
                // documented flag.
                check(concat!($p, "GraphInstantiateWithFlags"), unsafe {
                    (api()?.graph_instantiate_with_flags)(&mut exec, graph.0, flags)
                })?;
                Ok($exec(exec))
            }

            fn graph_exec_destroy(exec: $exec) -> crate::error::Result<()> {
                // SAFETY: the caller owns the executable graph and destroys
                // it once.
                check(concat!($p, "GraphExecDestroy"), unsafe { (api()?.graph_exec_destroy)(exec.0) })
            }

            fn graph_launch(exec: $exec, stream: $stream) -> crate::error::Result<()> {
                // SAFETY: handles made by this backend; the runtime validates them.
                check(concat!($p, "GraphLaunch"), unsafe { (api()?.graph_launch)(exec.0, stream.0) })
            }

            fn graph_upload(exec: $exec, stream: $stream) -> crate::error::Result<()> {
                let upload = api()?.graph_upload.get::<$codes>()?;
                // SAFETY: handles made by this backend; the runtime validates them.
                check(concat!($p, "GraphUpload"), unsafe { upload(exec.0, stream.0) })
            }

            fn graph_mem_get(device: usize, attr: crate::backend::GraphMemAttr) -> crate::error::Result<u64> {
                let get = api()?.device_get_graph_mem_attribute.get::<$codes>()?;
                // Zeroed: some runtimes (ROCm 5.3, 5.4) write only 32 bits.
                let mut value = 0u64;
                // SAFETY: every graph-memory attribute is a 64-bit integer.
                check(concat!($p, "DeviceGetGraphMemAttribute"), unsafe {
                    get(
                        crate::common::ordinal(device)?,
                        crate::common::graph_mem_attr(attr),
                        (&mut value as *mut u64).cast(),
                    )
                })?;
                Ok(value)
            }

            fn graph_mem_trim(device: usize) -> crate::error::Result<()> {
                let trim = api()?.device_graph_mem_trim.get::<$codes>()?;
                // SAFETY: plain value argument.
                check(concat!($p, "DeviceGraphMemTrim"), unsafe { trim(crate::common::ordinal(device)?) })
            }

            unsafe fn graph_retain_release(
                graph: $graph,
                release: crate::backend::GraphRelease,
                data: *mut std::ffi::c_void,
            ) -> crate::error::Result<()> {
                let api = api()?;
                let create = api.user_object_create.get::<$codes>()?;
                let retain = api.graph_retain_user_object.get::<$codes>()?;
                let mut object: $raw_user_object = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the caller guarantees
                // `release(data)` may run once, later, on a runtime thread.
                check(concat!($p, "UserObjectCreate"), unsafe {
                    create(&mut object, data, Some(release), 1, $no_sync)
                })?;
                // SAFETY: both handles are live; with the Move flag the graph
                // takes over the one reference made above. Should this fail,
                // the object keeps that reference: it leaks and `release` is
                // never called, so the caller still owns `data` (the trait's
                // error contract).
                check(concat!($p, "GraphRetainUserObject"), unsafe { retain(graph.0, object, 1, $move_ref) })
            }

            // ---- Virtual memory: the vendor's `vmm` module ----
            fn vmm_support(device: usize) -> crate::error::Result<crate::backend::VmmSupport> {
                vmm::support(device)
            }

            fn vmm_quirks() -> crate::backend::VmmQuirks {
                vmm::quirks()
            }

            fn vmm_reserve(bytes: usize, align: usize) -> crate::error::Result<crate::backend::DevicePtr> {
                vmm::reserve(bytes, align)
            }

            unsafe fn vmm_free_reservation(base: crate::backend::DevicePtr, bytes: usize) -> crate::error::Result<()> {
                // SAFETY: the trait's contract, passed on.
                unsafe { vmm::free_reservation(base, bytes) }
            }

            fn vmm_create(
                bytes: usize,
                props: crate::backend::PhysProps,
            ) -> crate::error::Result<crate::backend::PhysHandle> {
                vmm::create(bytes, props)
            }

            unsafe fn vmm_release(handle: crate::backend::PhysHandle) -> crate::error::Result<()> {
                // SAFETY: the trait's contract, passed on.
                unsafe { vmm::release(handle) }
            }

            unsafe fn vmm_map(
                ptr: crate::backend::DevicePtr,
                bytes: usize,
                handle: crate::backend::PhysHandle,
            ) -> crate::error::Result<()> {
                // SAFETY: the trait's contract, passed on.
                unsafe { vmm::map(ptr, bytes, handle) }
            }

            unsafe fn vmm_set_access(
                ptr: crate::backend::DevicePtr,
                bytes: usize,
                device: usize,
                read_write: bool,
            ) -> crate::error::Result<()> {
                // SAFETY: the trait's contract, passed on.
                unsafe { vmm::set_access(ptr, bytes, device, read_write) }
            }

            unsafe fn vmm_unmap(ptr: crate::backend::DevicePtr, bytes: usize) -> crate::error::Result<()> {
                // SAFETY: the trait's contract, passed on.
                unsafe { vmm::unmap(ptr, bytes) }
            }

            fn vmm_retain(ptr: crate::backend::DevicePtr) -> crate::error::Result<crate::backend::PhysHandle> {
                vmm::retain(ptr)
            }

            fn vmm_export_fd(handle: crate::backend::PhysHandle) -> crate::error::Result<i32> {
                vmm::export_fd(handle)
            }

            fn vmm_import_fd(fd: i32) -> crate::error::Result<crate::backend::PhysHandle> {
                vmm::import_fd(fd)
            }
        }

        // What only the test kit needs: not part of the allocator's contract.
        #[cfg(somalloc_kernels)]
        impl crate::backend::TestSupport for $backend {
            type Module = $module;
            type Function = $function;

            $($test_support)*

            // ---- Synchronous allocation and the rest of the test support ----
            fn peek_last_error() -> crate::error::Result<i32> {
                // SAFETY: no arguments; reads the thread's last error only.
                Ok(unsafe { (api()?.peek_at_last_error)() })
            }

            fn malloc_sync(device: usize, bytes: usize) -> crate::error::Result<crate::backend::DevicePtr> {
                refuse_zero_bytes(bytes, "a synchronous allocation of 0 bytes")?;
                let _device = crate::common::DeviceGuard::<Self>::set(device)?;
                let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: valid out-pointer.
                let code = unsafe { (api()?.malloc)(&mut p, bytes) };
                check_alloc(concat!($p, "Malloc"), code, bytes)?;
                Ok(crate::backend::DevicePtr(p as usize))
            }

            unsafe fn free_sync(device: usize, ptr: crate::backend::DevicePtr) -> crate::error::Result<()> {
                if free_is_noop(ptr) {
                    return Ok(());
                }
                let _device = crate::common::DeviceGuard::<Self>::set(device)?;
                // SAFETY: the caller guarantees `ptr` came from the
                // synchronous malloc and is live; the free waits for the
                // device before releasing it.
                check(concat!($p, "Free"), unsafe { (api()?.free)(ptr.as_mut_ptr()) })
            }
        }
    };
}
pub(crate) use backend_impl;
