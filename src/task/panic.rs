//! Catching panics of user code inside tasks.
//!
//! A process-wide panic hook (installed once) records the message and location of a
//! panic on a task thread into a thread-local slot instead of printing it, so the
//! failure is reported once, by the job, with stage and partition. Panics on other
//! threads go to the previous hook unchanged.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the hook (idempotent).
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if IN_TASK.with(Cell::get) {
                let msg = payload_message(info.payload());
                let text = match info.location() {
                    Some(l) => format!(
                        "panicked at {}:{}:{}: {msg}",
                        l.file(),
                        l.line(),
                        l.column()
                    ),
                    None => format!("panicked: {msg}"),
                };
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(text));
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into `Err(message with location)`.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let was = IN_TASK.with(|t| t.replace(true));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    IN_TASK.with(|t| t.set(was));
    r.map_err(|payload| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| format!("panicked: {}", payload_message(payload.as_ref())))
    })
}
