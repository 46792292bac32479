//! The example jobs' memory allocator: mimalloc, told to keep freed memory for reuse.
//!
//! A job binary picks its own allocator (ember does not impose one). The examples use
//! mimalloc, which the benchmarks showed far faster than glibc malloc for ember's many
//! short-lived records, and disable its purging of freed pages: a batch job reuses its
//! memory task after task, and returning it to the OS only to fault it back in (zeroed
//! by the kernel) cost about 14 % of the sort job's time.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (the same index in mimalloc v2 and v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// `mi_option_purge_decommits` in mimalloc.h (the same index in v2 and v3).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Keeps freed pages instead of returning them to the OS (`-1`: never purge), and
/// where mimalloc purges anyway (freed huge blocks), resets the pages instead of
/// decommitting them, so reusing them faults in no fresh zeroed pages. On the sort job
/// the second setting took system time from 6.4 s to 3.2 s (9.5 s to 7.9 s wall).
pub fn keep_freed_memory() {
    // SAFETY: setting an option is always allowed; it only changes later purging.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0);
    }
}
