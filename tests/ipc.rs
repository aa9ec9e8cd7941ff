//! IPC between two processes: a pool exported as a POSIX file descriptor and
//! passed over a Unix socket (SCM_RIGHTS), a buffer exported by pointer data,
//! written by a kernel in the importing process and verified by the
//! exporting one. The importer releases before the exporter frees.
//!
//! The test spawns its own binary as the second process (role chosen by an
//! environment variable), so it has its own `main` (harness = false) and
//! prints libtest-style result lines.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, ExitCode};

use somalloc::testkit::TestKernels;
use somalloc::{Device, DeviceBuffer, Error, ExportHandle, ExportedBuffer, MemPool, PoolProperties, Stream};

const CHILD_ENV: &str = "SOMALLOC_IPC_CHILD_SOCKET";
const TEST: &str = "ipc::pool_and_buffer_across_processes";
const BYTES: usize = 8 << 20;
const SEED: u32 = 31;

type Res<T> = std::result::Result<T, String>;

fn err(what: &str) -> impl Fn(Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn main() -> ExitCode {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return match child(&path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ipc child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::args().any(|a| a == "--list") {
        println!("{TEST}: test");
        return ExitCode::SUCCESS;
    }
    println!("\nrunning 1 test");
    let (ok, line) = match parent() {
        Ok(None) => (true, format!("test {TEST} ... ok")),
        Ok(Some(skip)) => {
            eprintln!("SKIP {TEST}: {skip}");
            (true, format!("test {TEST} ... ok"))
        }
        Err(e) => (false, format!("test {TEST} ... FAILED\n{e}")),
    };
    println!("{line}\n");
    println!(
        "test result: {}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out",
        if ok { "ok" } else { "FAILED" },
        u8::from(ok),
        u8::from(!ok)
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The exporting process. `Ok(Some(reason))` is a skip.
fn parent() -> Res<Option<String>> {
    let dev = match Device::get(0) {
        Ok(d) => d,
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            return Ok(Some(format!("no GPU ({e})")))
        }
        Err(e) => return Err(format!("device 0: {e}")),
    };
    let k = TestKernels::load(&dev).map_err(err("load kernels"))?;
    let props = PoolProperties::device().export(ExportHandle::PosixFd);
    let pool = MemPool::create(&dev, props).map_err(err("create exportable pool"))?;
    let stream = Stream::new(&dev).map_err(err("stream"))?;
    let mut buf = DeviceBuffer::<u8>::new_in(BYTES, &pool, &stream).map_err(err("allocate"))?;
    k.fill(&mut buf, SEED, &stream).map_err(err("fill"))?;
    stream.synchronize().map_err(err("sync"))?; // the allocation is complete before export
    let pool_fd = pool.export_fd().map_err(err("export pool"))?;
    let exported = buf.export().map_err(err("export buffer"))?;

    let dir = std::env::temp_dir().join(format!("somalloc-ipc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("bind: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(CHILD_ENV, &path)
        .spawn()
        .map_err(|e| format!("spawn the second process: {e}"))?;
    let result = (|| -> Res<u64> {
        let (mut sock, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        let mut msg = exported.to_bytes().to_vec();
        msg.extend_from_slice(&SEED.to_le_bytes());
        send_with_fd(&sock, &msg, pool_fd.as_raw_fd())?;
        // The child answers after it has released everything it imported.
        let mut answer = [0u8; 8];
        sock.read_exact(&mut answer)
            .map_err(|e| format!("read the child's answer: {e}"))?;
        Ok(u64::from_le_bytes(answer))
    })();
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let child_mismatches = result?;
    if !status.success() {
        return Err(format!("the second process failed: {status}"));
    }
    if child_mismatches != 0 {
        return Err(format!(
            "the importer saw {child_mismatches} wrong bytes of the exporter's fill"
        ));
    }
    // The importer wrote SEED + 1 with its own kernel.
    let bad = k.verify(&buf, SEED + 1, &stream).map_err(err("verify"))?;
    if bad != 0 {
        return Err(format!("{bad} bytes differ from the importer's write"));
    }
    drop(buf); // the exporter frees last
    stream.synchronize().map_err(err("sync"))?;
    let used = pool.stats().map_err(err("stats"))?.used_current;
    if used != 0 {
        return Err(format!("pool used bytes did not return to 0: {used}"));
    }
    Ok(None)
}

/// The importing process.
fn child(path: &str) -> Res<()> {
    let mut sock = UnixStream::connect(path).map_err(|e| format!("connect: {e}"))?;
    let mut msg = [0u8; ExportedBuffer::WIRE_SIZE + 4];
    let (n, fd) = recv_with_fd(&sock, &mut msg)?;
    if n != msg.len() {
        return Err(format!("short message: {n} bytes"));
    }
    let fd = fd.ok_or("no file descriptor arrived")?;
    let mut wire = [0u8; ExportedBuffer::WIRE_SIZE];
    wire.copy_from_slice(&msg[..ExportedBuffer::WIRE_SIZE]);
    let exported = ExportedBuffer::from_bytes(&wire);
    let seed = u32::from_le_bytes([msg[72], msg[73], msg[74], msg[75]]);

    let dev = Device::get(0).map_err(err("device"))?;
    let k = TestKernels::load(&dev).map_err(err("kernels"))?;
    let stream = Stream::new(&dev).map_err(err("stream"))?;
    let pool = MemPool::import_fd(&dev, fd.as_fd()).map_err(err("import pool"))?;
    drop(fd); // the runtime keeps what it needs
              // SAFETY: the exporter allocated and filled the buffer, synchronised,
              // and frees it only after this process answers below, which it does
              // after dropping the import and synchronising its stream.
    let mut buf =
        unsafe { DeviceBuffer::<u8>::import(&pool, &exported, &stream) }.map_err(err("import buffer"))?;
    if buf.len() != BYTES {
        return Err(format!("imported {} bytes, expected {BYTES}", buf.len()));
    }
    let mismatches = k.verify(&buf, seed, &stream).map_err(err("verify"))?;
    k.fill(&mut buf, seed + 1, &stream).map_err(err("fill"))?;
    drop(buf); // importer releases first
    stream.synchronize().map_err(err("sync"))?;
    drop(pool);
    sock.write_all(&mismatches.to_le_bytes())
        .map_err(|e| format!("answer: {e}"))?;
    Ok(())
}

/// Room for one control message that carries one file descriptor.
fn fd_control() -> Vec<u8> {
    // SAFETY: CMSG_SPACE only computes a size.
    vec![0u8; unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize]
}

/// A message header over one data buffer and a control buffer; both must
/// outlive every use of the header.
fn msg_header(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: a zeroed msghdr is a valid empty header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = control.len() as _;
    hdr
}

fn send_with_fd(sock: &UnixStream, payload: &[u8], fd: RawFd) -> Res<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = fd_control();
    let hdr = msg_header(&mut iov, &mut control);
    // SAFETY: the control buffer holds one header with room for one fd.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: a valid socket and header.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, 0) };
    if n < 0 || n as usize != payload.len() {
        return Err(format!("sendmsg: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn recv_with_fd(sock: &UnixStream, buf: &mut [u8]) -> Res<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = fd_control();
    let mut hdr = msg_header(&mut iov, &mut control);
    // SAFETY: a valid socket and header; MSG_WAITALL for the whole payload.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_WAITALL) };
    if n < 0 {
        return Err(format!("recvmsg: {}", std::io::Error::last_os_error()));
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        if !cmsg.is_null() && (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
            fd = Some(OwnedFd::from_raw_fd(raw));
        }
    }
    Ok((n as usize, fd))
}
