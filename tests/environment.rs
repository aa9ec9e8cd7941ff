//! A bad environment gives a typed error, never a panic: no runtime library
//! (`Error::RuntimeNotFound`) and no visible device (`Error::NoDevice`).
//!
//! Each case runs this binary again as a child process with the environment
//! changed before the runtime is loaded (the runtime is loaded once per
//! process), and checks what the child reports. Runs the same with or
//! without a GPU. Own `main` (harness = false), libtest-style output.

use std::process::{Command, ExitCode};

use somalloc::{Device, DeviceBuffer, Error, MemPool, Stream};

const ROLE: &str = "SOMALLOC_ENV_TEST_CHILD";

/// What the child does: open device 0 and try the calls a program starts
/// with; prints one `kind=` line naming the outcome.
fn child() -> ExitCode {
    let outcome = match Device::get(0) {
        Ok(dev) => {
            // A device is visible: the rest must work.
            let r = Stream::new(&dev).and_then(|s| {
                let b = DeviceBuffer::<u8>::new(1024, &s)?;
                drop(b);
                MemPool::default_for(&dev)?;
                s.synchronize()
            });
            match r {
                Ok(()) => "kind=Ok".to_string(),
                Err(e) => format!("kind=Failed {e}"),
            }
        }
        Err(Error::RuntimeNotFound { searched, .. }) => {
            format!("kind=RuntimeNotFound searched={}", searched.join(","))
        }
        Err(Error::NoDevice { .. }) => "kind=NoDevice".to_string(),
        Err(e) => format!("kind=Other {e}"),
    };
    // Both counts must agree with `get`.
    let count = match Device::count() {
        Ok(n) => format!("count=Ok({n})"),
        Err(Error::RuntimeNotFound { .. }) => "count=RuntimeNotFound".into(),
        Err(Error::NoDevice { .. }) => "count=NoDevice".into(),
        Err(e) => format!("count=Other {e}"),
    };
    println!("{outcome}\n{count}");
    ExitCode::SUCCESS
}

fn run_child(envs: &[(&str, &str)]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.env(ROLE, "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "child exited with {} (a panic?):\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}

fn no_runtime_library() -> Result<(), String> {
    let missing = "/nonexistent/somalloc-test/libvendor.so";
    let text = run_child(&[("SOMALLOC_CUDART", missing), ("SOMALLOC_AMDHIP", missing)])?;
    if !text.contains(&format!("kind=RuntimeNotFound searched={missing}"))
        || !text.contains("count=RuntimeNotFound")
    {
        return Err(format!("expected RuntimeNotFound naming {missing}, got:\n{text}"));
    }
    Ok(())
}

fn no_visible_device() -> Result<(), String> {
    let text = run_child(&[
        ("CUDA_VISIBLE_DEVICES", ""),
        ("HIP_VISIBLE_DEVICES", ""),
        ("ROCR_VISIBLE_DEVICES", ""),
    ])?;
    // With a runtime: NoDevice. Without one (CI): RuntimeNotFound.
    let ok = (text.contains("kind=NoDevice") && text.contains("count=NoDevice"))
        || (text.contains("kind=RuntimeNotFound") && text.contains("count=RuntimeNotFound"));
    if !ok {
        return Err(format!(
            "expected NoDevice (or RuntimeNotFound without a runtime), got:\n{text}"
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    if std::env::var_os(ROLE).is_some() {
        return child();
    }
    type Case = (&'static str, fn() -> Result<(), String>);
    let cases: [Case; 2] = [
        ("environment::no_runtime_library", no_runtime_library),
        ("environment::no_visible_device", no_visible_device),
    ];
    if std::env::args().any(|a| a == "--list") {
        for (name, _) in cases {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    println!("\nrunning {} tests", cases.len());
    let mut failed = 0;
    for (name, case) in cases {
        match case() {
            Ok(()) => println!("test {name} ... ok"),
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED\n{e}");
            }
        }
    }
    let passed = cases.len() - failed;
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
