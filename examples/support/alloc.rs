//! The example jobs' memory allocator: mimalloc, told to keep freed memory for reuse up to
//! a budget tied to the executor's memory.
//!
//! A job binary picks its own allocator (ember does not impose one). The examples use
//! mimalloc, which the benchmarks showed far faster than glibc malloc for ember's many
//! short-lived records. Returning freed pages to the OS soon after they empty (mimalloc's
//! default, 10 ms) and faulting them back in, zeroed by the kernel, cost the sort job 2-5 s
//! of system time; keeping every freed page instead (what the examples did until
//! 2026-12-02) let a sort under a 128 MiB execution memory limit keep 420 MiB resident of
//! which it used 170 (the pool counts what records hold, not what the allocator keeps). So
//! freed pages are kept while the process stays under its budget, and returned all at once
//! when it goes over.
//!
//! Invariant: every [`TRIM_EVERY`] a trimmer thread compares the process's resident set with
//! the budget (`EMBER_EXECUTOR_MEMORY`, else ember's default, plus [`SLACK_BYTES`]) and, when
//! over, forces a collection that returns every freed page to the OS. Memory in use is
//! never touched: a process whose live data is over the budget (the pool lets a consumer go
//! past its share below the spill floor; fixed buffers are not charged) stays over it until
//! it frees. Pages freed and unused for [`IDLE_PURGE_MS`] go back even under the budget.
//! Measured on the sort of the kv set (`bench/results/2026-12-02-e66c136-memory.md`): peak RSS
//! 94 / 164 / 554 MiB at 64m / 128m / 512m, at the speed of keeping everything.

use std::time::Duration;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (the same index in mimalloc v2 and v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// `mi_option_purge_decommits` in mimalloc.h (the same index in v2 and v3).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Resident memory allowed beyond the executor's memory before freed pages are returned.
pub const SLACK_BYTES: u64 = 16 << 20;
/// How often the trimmer looks at the heap.
const TRIM_EVERY: Duration = Duration::from_millis(10);
/// Freed pages unused this long are returned even under the budget (milliseconds).
const IDLE_PURGE_MS: std::ffi::c_long = 2000;

/// Keeps freed pages for reuse (returning only pages idle for [`IDLE_PURGE_MS`]) and starts
/// the trimmer that holds the heap to its budget.
pub fn keep_freed_memory() {
    // SAFETY: setting an option is always allowed; it only changes later purging.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, IDLE_PURGE_MS);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 1);
    }
    no_transparent_huge_pages();
    let memory = std::env::var("EMBER_EXECUTOR_MEMORY")
        .ok()
        .and_then(|v| ember::memory::parse_memory_size(&v).ok())
        .unwrap_or(ember::DEFAULT_EXECUTOR_MEMORY);
    let budget = usize::try_from(memory.saturating_add(SLACK_BYTES)).unwrap_or(usize::MAX);
    // SAFETY: sysconf with a valid name only reads a constant.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let _ = std::thread::Builder::new()
        .name("heap-trimmer".into())
        .spawn(move || loop {
            std::thread::sleep(TRIM_EVERY);
            if resident_pages() * page > budget {
                // SAFETY: mi_collect may be called from any thread at any time.
                unsafe { libmimalloc_sys::mi_collect(true) };
            }
        });
}

/// The process's resident set in pages (`/proc/self/statm`), or 0 where it cannot be read.
/// mimalloc's own commit figure counts memory committed ahead and never touched, which set
/// the trimmer off while the process was well under its budget.
fn resident_pages() -> usize {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
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
