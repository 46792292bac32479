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

/// Keeps freed pages instead of returning them to the OS (`-1`: never purge).
pub fn keep_freed_memory() {
    // SAFETY: setting an option is always allowed; it only changes later purging.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}
