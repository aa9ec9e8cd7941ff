use somalloc::testkit::TestKernels;
use somalloc::{
    Device, DeviceBuffer, Error, Event, InvalidReason, MemPool, PeerAccess, PoolProperties, Stream,
};

use crate::common::{device, say};

/// Two devices that can reach each other, or `None` after a skip line.
fn two_devices(test: &str) -> Option<(Device, Device)> {
    let d0 = device(test)?;
    let count = Device::count().unwrap();
    if count < 2 {
        say(&format!("SKIP {test}: needs 2 GPUs (found {count})"));
        return None;
    }
    let d1 = Device::get(1).unwrap();
    if !d1.can_access_peer(&d0).unwrap() {
        say(&format!("SKIP {test}: device 1 cannot access device 0's memory"));
        return None;
    }
    Some((d0, d1))
}

/// Allocate from GPU 0's pool, grant GPU 1 access, a kernel on GPU 1 writes,
/// GPU 0 verifies; with access removed the API refuses the use.
#[test]
fn peer_access_write_on_one_verify_on_zero() {
    let test = "peer::peer_access_write_on_one_verify_on_zero";
    let Some((d0, d1)) = two_devices(test) else { return };
    let (k0, k1) = (TestKernels::load(&d0).unwrap(), TestKernels::load(&d1).unwrap());
    let pool = MemPool::create(&d0, PoolProperties::default()).unwrap();
    pool.set_release_threshold(usize::MAX).unwrap();
    let (s0, s1) = (Stream::new(&d0).unwrap(), Stream::new(&d1).unwrap());
    assert_eq!(pool.access(&d0).unwrap(), PeerAccess::ReadWrite);
    assert_eq!(
        pool.access(&d1).unwrap(),
        PeerAccess::None,
        "created pools start without peer access"
    );
    assert!(matches!(
        pool.set_access(&d0, PeerAccess::None),
        Err(Error::InvalidArgument {
            reason: InvalidReason::Other,
            ..
        })
    ));

    let mut buf = DeviceBuffer::<u8>::new_in(16 << 20, &pool, &s0).unwrap();
    k0.fill(&mut buf, 1, &s0).unwrap();
    assert!(
        matches!(
            buf.use_on(&s1),
            Err(Error::InvalidArgument {
                reason: InvalidReason::NoPeerAccess,
                ..
            })
        ),
        "no access yet"
    );
    assert!(matches!(
        k1.fill(&mut buf, 2, &s1),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));

    pool.set_access(&d1, PeerAccess::ReadWrite).unwrap();
    assert_eq!(pool.access(&d1).unwrap(), PeerAccess::ReadWrite);
    buf.use_on(&s1).unwrap();
    assert_eq!(k1.verify(&buf, 1, &s1).unwrap(), 0, "GPU 1 reads GPU 0's fill");
    k1.fill(&mut buf, 2, &s1).unwrap();
    let done = Event::new(&d1).unwrap();
    done.record(&s1).unwrap();
    s0.wait_event(&done).unwrap();
    assert_eq!(k0.verify(&buf, 2, &s0).unwrap(), 0, "GPU 0 sees GPU 1's write");

    pool.set_access(&d1, PeerAccess::None).unwrap();
    assert_eq!(pool.access(&d1).unwrap(), PeerAccess::None);
    assert!(
        !buf.is_usable_on(&s1),
        "access removed: the buffer is no longer usable on GPU 1"
    );
    assert!(matches!(
        k1.fill(&mut buf, 3, &s1),
        Err(Error::InvalidArgument {
            reason: InvalidReason::WrongStream,
            ..
        })
    ));
    assert!(matches!(
        buf.use_on(&s1),
        Err(Error::InvalidArgument {
            reason: InvalidReason::NoPeerAccess,
            ..
        })
    ));

    // A buffer from the current pool (no explicit pool) is refused too.
    let mut plain = DeviceBuffer::<u8>::new(4096, &s0).unwrap();
    assert!(matches!(
        plain.use_on(&s1),
        Err(Error::InvalidArgument {
            reason: InvalidReason::NoPeerAccess,
            ..
        })
    ));
    drop(plain);
    drop(buf);
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
}

/// Every device has its own default pool, and a thread whose current device
/// is another one still allocates on the stream's device.
#[test]
fn per_device_default_pools_from_any_thread() {
    let test = "peer::per_device_default_pools_from_any_thread";
    let Some((d0, d1)) = two_devices(test) else { return };
    let p0 = MemPool::default_for(&d0).unwrap();
    let p1 = MemPool::default_for(&d1).unwrap();
    assert_ne!(p0, p1);
    assert_eq!(p1.device(), d1);
    std::thread::spawn(move || {
        d0.bind_to_thread().unwrap(); // the "wrong" device is current here
        let k1 = TestKernels::load(&d1).unwrap();
        d0.bind_to_thread().unwrap();
        let s1 = Stream::new(&d1).unwrap();
        let pool = MemPool::create(&d1, PoolProperties::default()).unwrap();
        let mut buf = DeviceBuffer::<u8>::new_in(1 << 20, &pool, &s1).unwrap();
        k1.fill(&mut buf, 9, &s1).unwrap();
        assert_eq!(k1.verify(&buf, 9, &s1).unwrap(), 0);
        assert!(pool.stats().unwrap().used_current >= 1 << 20);
        drop(buf);
        s1.synchronize().unwrap();
        assert_eq!(pool.stats().unwrap().used_current, 0);
    })
    .join()
    .unwrap();
}
