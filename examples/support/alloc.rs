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
    no_transparent_huge_pages();
}

/// mimalloc v3 asks for transparent huge pages on its arenas (`madvise(MADV_HUGEPAGE)`),
/// and where the kernel's THP `defrag` setting is `madvise` (Debian's default) every fault
/// on such a region may compact memory synchronously first. With the page cache full of
/// input that is slow: on parquet_etl system time went from 0.6 s to 1.5-2.9 s, and
/// `perf` showed `clear_page_erms` under `do_huge_pmd_anonymous_page` at 11.7 %. The
/// option `mi_option_allow_thp` is read before `main` runs (the arena is reserved on
/// the first allocation), so THP is turned off for the whole process instead.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of
    // ours; it fails harmlessly on kernels without it.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
