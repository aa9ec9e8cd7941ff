//! The allocation entry point for PyTorch's pluggable allocator that raises
//! PyTorch's own exceptions, built into this module: no compiler needed.
//!
//! PyTorch's pluggable path has no error channel: a NULL from the
//! allocation function becomes a storage at address 0. PyTorch's own
//! allocators throw `c10::OutOfMemoryError` instead, a C++ exception that
//! PyTorch's Python bindings turn into `torch.OutOfMemoryError`. This
//! module throws the same exception from Rust (`extern "C-unwind"`): with
//! the C++ runtime's `__cxa_allocate_exception` and `__cxa_throw`, and the
//! exported constructor of `c10::Error` from the `libc10` that PyTorch
//! loaded. `somalloc.torch` looks these symbols up with `ctypes` and hands
//! their addresses to [`torch_oom_init`]; the functions are called only when
//! an allocation is refused.
//!
//! What it relies on, all of it checked when the symbols are looked up or
//! stable across PyTorch's releases: the Itanium C++ ABI (the exception
//! runtime, a `std::string` passed by value as a pointer to a temporary
//! that the caller destroys), `c10::SourceLocation` being `{const char*
//! function; const char* file; uint32_t line;}`, the constructor
//! `c10::Error(SourceLocation, std::string)`, and `c10::OutOfMemoryError`
//! adding nothing to `c10::Error` (it inherits its constructors). The
//! exception object is made by `libc10`'s own constructor, so its layout is
//! always the loaded PyTorch's. Where `OutOfMemoryError`'s `type_info` is
//! not exported, one is made here with its mangled name: the C++ runtime
//! matches a `catch` clause by that name.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `c10::SourceLocation`.
#[repr(C)]
struct SourceLocation {
    function: *const c_char,
    file: *const c_char,
    line: u32,
}

/// `c10::Error::Error(SourceLocation, std::string)` (complete-object
/// constructor): `this`, the location by value, the string by address.
type ErrorCtor = unsafe extern "C-unwind" fn(*mut c_void, SourceLocation, *mut c_void);
/// `std::string::string(const char*, const std::allocator<char>&)`.
type StringCtor = unsafe extern "C-unwind" fn(*mut c_void, *const c_char, *const c_void);
/// `std::string::~string()`.
type StringDtor = unsafe extern "C" fn(*mut c_void);
/// `__cxa_allocate_exception`.
type AllocException = unsafe extern "C" fn(usize) -> *mut c_void;
/// `__cxa_throw`.
type Throw = unsafe extern "C-unwind" fn(*mut c_void, *const c_void, *const c_void) -> !;
/// The runtime's `cudaPeekAtLastError` / `cudaGetLastError` (or hip's).
type LastError = unsafe extern "C" fn() -> c_int;

/// The runtime's out-of-memory error code (`cudaErrorMemoryAllocation`,
/// `hipErrorOutOfMemory`).
const RUNTIME_OUT_OF_MEMORY: c_int = 2;

/// Bytes asked for the exception object: more than any `c10::Error` (a
/// couple of hundred bytes); the constructor uses what it needs.
const EXCEPTION_BYTES: usize = 1024;

/// Room for a `std::string` (32 bytes with the C++11 ABI, 8 with the old one).
const STRING_WORDS: usize = 8;

/// `abi::__si_class_type_info`: a class's `type_info` with one public base.
#[repr(C)]
struct SiClassTypeInfo {
    vptr: *const c_void,
    name: *const c_char,
    base: *const c_void,
}

#[derive(Clone, Copy)]
struct Symbols {
    error_ctor: ErrorCtor,
    string_ctor: StringCtor,
    string_dtor: StringDtor,
    alloc_exception: AllocException,
    throw: Throw,
    error_typeinfo: *const c_void,
    oom_typeinfo: *const c_void,
    /// The address point of `OutOfMemoryError`'s vtable, where exported.
    oom_vtable: *const c_void,
    peek: Option<LastError>,
    get: Option<LastError>,
}

// SAFETY: addresses of functions and of immutable objects that live as
// long as the process (the libraries are never unloaded while PyTorch runs,
// and a `type_info` made here is leaked).
unsafe impl Send for Symbols {}
unsafe impl Sync for Symbols {}

static SYMBOLS: RwLock<Option<Symbols>> = RwLock::new(None);

fn address(symbols: &Bound<'_, PyDict>, key: &str) -> PyResult<usize> {
    match symbols.get_item(key)? {
        Some(v) if !v.is_none() => v.extract(),
        _ => Ok(0),
    }
}

/// Hands over the addresses the raising entry point needs, as a dict of
/// ints (0 or missing: not found): `error_ctor`, `string_ctor`,
/// `string_dtor`, `alloc_exception`, `throw`, `error_typeinfo` (all
/// required), `oom_typeinfo`, `oom_vtable` (the symbol's address, not its
/// address point), `si_class_vtable` (needed where `oom_typeinfo` is 0),
/// `peek` and `get` (the runtime's last-error functions; both or neither).
/// Returns whether `OutOfMemoryError`'s `type_info` was made here. A second
/// call replaces the first.
#[pyfunction]
pub fn torch_oom_init(symbols: &Bound<'_, PyDict>) -> PyResult<bool> {
    let get = |k| address(symbols, k);
    let required = [
        "error_ctor",
        "string_ctor",
        "string_dtor",
        "alloc_exception",
        "throw",
        "error_typeinfo",
    ];
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| get(k).map_or(true, |a| a == 0))
        .collect();
    if !missing.is_empty() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "missing symbols: {}",
            missing.join(", ")
        )));
    }
    let error_typeinfo = get("error_typeinfo")? as *const c_void;
    let mut made = false;
    let oom_typeinfo = match get("oom_typeinfo")? {
        0 => {
            let si = get("si_class_vtable")?;
            if si == 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "missing symbols: oom_typeinfo (and si_class_vtable to make one)",
                ));
            }
            made = true;
            // The vtable symbol's address point is two words in (offset to
            // top, type_info).
            let info = Box::new(SiClassTypeInfo {
                vptr: (si + 2 * std::mem::size_of::<usize>()) as *const c_void,
                name: c"N3c1016OutOfMemoryErrorE".as_ptr(),
                base: error_typeinfo,
            });
            Box::into_raw(info) as *const c_void
        }
        a => a as *const c_void,
    };
    let oom_vtable = match get("oom_vtable")? {
        0 => std::ptr::null(),
        a => (a + 2 * std::mem::size_of::<usize>()) as *const c_void,
    };
    let (peek, last) = (get("peek")?, get("get")?);
    // SAFETY: the addresses are those of the named functions, looked up by
    // their (mangled) names in the libraries PyTorch loaded, so their types
    // are the ones above; none is 0 (checked).
    let s = unsafe {
        Symbols {
            error_ctor: std::mem::transmute::<usize, ErrorCtor>(get("error_ctor")?),
            string_ctor: std::mem::transmute::<usize, StringCtor>(get("string_ctor")?),
            string_dtor: std::mem::transmute::<usize, StringDtor>(get("string_dtor")?),
            alloc_exception: std::mem::transmute::<usize, AllocException>(get("alloc_exception")?),
            throw: std::mem::transmute::<usize, Throw>(get("throw")?),
            error_typeinfo,
            oom_typeinfo,
            oom_vtable,
            peek: (peek != 0 && last != 0).then(|| std::mem::transmute::<usize, LastError>(peek)),
            get: (peek != 0 && last != 0).then(|| std::mem::transmute::<usize, LastError>(last)),
        }
    };
    *SYMBOLS.write().unwrap_or_else(|p| p.into_inner()) = Some(s);
    Ok(made)
}

/// Whether [`torch_oom_init`] was given the symbols.
#[pyfunction]
pub fn torch_oom_ready() -> bool {
    SYMBOLS.read().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// The allocation function of PyTorch's `CUDAPluggableAllocator` that
/// raises: `somalloc_torch_alloc`, and where it returns NULL for a
/// non-empty request, a C++ exception: `c10::OutOfMemoryError`
/// (`torch.OutOfMemoryError`) when somalloc's status is out of memory,
/// `c10::Error` (`RuntimeError`) for any other failure, with somalloc's
/// reason. Like PyTorch's own allocators it first clears the runtime's
/// out-of-memory error that the refusal may have left (another pending
/// error is left alone). Before [`torch_oom_init`], it returns the NULL.
///
/// # Safety
/// As for `somalloc_torch_alloc`; the caller is C++ code that catches
/// (PyTorch).
#[no_mangle]
pub unsafe extern "C-unwind" fn somalloc_torch_alloc_raising(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's guarantees.
    let p = unsafe { somalloc::somalloc_torch_alloc(size, device, stream) };
    if p.is_null() && size != 0 {
        let symbols = *SYMBOLS.read().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = symbols {
            let oom = somalloc::somalloc_last_error() == somalloc::SomallocStatus::OutOfMemory;
            // SAFETY: the symbols are the ones `torch_oom_init` documents.
            unsafe { raise(&s, size, device, oom) };
        }
    }
    p
}

/// Throws what [`somalloc_torch_alloc_raising`] throws for a refusal of
/// `size` bytes on `device` (`c10::OutOfMemoryError` where `out_of_memory`
/// is not 0, else `c10::Error`), with the thread's last error as the
/// reason; returns only before [`torch_oom_init`]. For checking the raising
/// path from C++ without a GPU (`python/tests/oom_shim_check.py`).
///
/// # Safety
/// The caller is C++ code that catches.
#[no_mangle]
pub unsafe extern "C-unwind" fn somalloc_torch_raise_check(size: usize, device: c_int, out_of_memory: c_int) {
    let symbols = *SYMBOLS.read().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = symbols {
        // SAFETY: the symbols are the ones `torch_oom_init` documents.
        unsafe { raise(&s, size, device, out_of_memory != 0) };
    }
}

/// Throws the exception for a refused allocation of `size` bytes on
/// `device` (`c10::OutOfMemoryError` for `oom`, else `c10::Error`); the
/// reason is the thread's last error.
///
/// # Safety
/// `s` holds the functions and objects its fields name.
unsafe fn raise(s: &Symbols, size: usize, device: c_int, oom: bool) -> ! {
    let why = somalloc::last_error_text();
    let why = if why.is_empty() {
        "no reason given".to_string()
    } else {
        why
    };
    let text = if oom {
        format!("somalloc: out of memory: could not allocate {size} bytes on device {device} ({why})")
    } else {
        format!("somalloc: could not allocate {size} bytes on device {device} ({why})")
    };
    let message = CString::new(text.replace('\0', " ")).unwrap_or_default();
    drop(text);
    if let (Some(peek), Some(get)) = (s.peek, s.get) {
        // SAFETY: the runtime's functions, callable from any thread.
        unsafe {
            if peek() == RUNTIME_OUT_OF_MEMORY {
                get();
            }
        }
    }
    let location = SourceLocation {
        function: c"somalloc_torch_alloc_raising".as_ptr(),
        file: c"somalloc/_native (python/src/oom.rs)".as_ptr(),
        line: line!(),
    };
    let mut string = [0usize; STRING_WORDS];
    let string_ptr = string.as_mut_ptr().cast::<c_void>();
    // `std::allocator<char>` is empty: any address will do.
    let allocator = 0u8;
    // SAFETY: the C++ runtime's and libc10's functions (see the module
    // docs): a string is made in `string`, passed to the constructor by
    // address as a by-value argument is, and destroyed by us, the caller,
    // afterwards; the exception object is made by the constructor in memory
    // from `__cxa_allocate_exception` and thrown with its type and its
    // vtable's complete-object destructor (the first slot: `c10::Error`
    // derives from `std::exception`, whose first virtual function is the
    // destructor).
    unsafe {
        (s.string_ctor)(string_ptr, message.as_ptr(), (&allocator as *const u8).cast());
        drop(message);
        let object = (s.alloc_exception)(EXCEPTION_BYTES);
        (s.error_ctor)(object, location, string_ptr);
        (s.string_dtor)(string_ptr);
        let typeinfo = if oom {
            if !s.oom_vtable.is_null() {
                *object.cast::<*const c_void>() = s.oom_vtable;
            }
            s.oom_typeinfo
        } else {
            s.error_typeinfo
        };
        let vtable = *object.cast::<*const *const c_void>();
        let destructor = *vtable;
        (s.throw)(object, typeinfo, destructor)
    }
}
