//! The console progress line, as Spark shows it: `[Stage 2:=====>   (5 + 2) / 8]` on
//! stderr, redrawn at most ten times a second, only when stderr is a terminal.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(Default)]
struct StageProgress {
    total: u32,
    running: u32,
    done: u32,
}

/// Progress of the stages of one job.
pub(crate) struct ProgressBar {
    enabled: bool,
    stages: BTreeMap<u32, StageProgress>,
    last_draw: Option<Instant>,
    drawn: bool,
    /// A change not drawn yet (it came within 100 ms of the last draw).
    dirty: bool,
}

const WIDTH: usize = 40;

impl ProgressBar {
    pub(crate) fn new(wanted: bool) -> Self {
        ProgressBar {
            enabled: wanted && std::io::stderr().is_terminal(),
            stages: BTreeMap::new(),
            last_draw: None,
            drawn: false,
            dirty: false,
        }
    }

    pub(crate) fn stage_submitted(&mut self, stage: u32, tasks: u32) {
        let s = self.stages.entry(stage).or_default();
        s.total += tasks;
        self.draw(false);
    }

    pub(crate) fn task_started(&mut self, stage: u32) {
        self.stages.entry(stage).or_default().running += 1;
        self.draw(false);
    }

    pub(crate) fn task_ended(&mut self, stage: u32, succeeded: bool) {
        let s = self.stages.entry(stage).or_default();
        s.running = s.running.saturating_sub(1);
        if succeeded {
            s.done += 1;
        }
        self.draw(false);
    }

    pub(crate) fn stage_completed(&mut self, stage: u32) {
        self.stages.remove(&stage);
        self.draw(true);
    }

    /// Draws a change that came too soon after the last draw (called when no event
    /// came for a while).
    pub(crate) fn tick(&mut self) {
        if self.dirty {
            self.draw(true);
        }
    }

    /// Clears the line.
    pub(crate) fn finish(&mut self) {
        if self.enabled && self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:width$}\r", "", width = WIDTH + 40);
            let _ = err.flush();
        }
    }

    fn draw(&mut self, force: bool) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if !force
            && self
                .last_draw
                .is_some_and(|t| now - t < Duration::from_millis(100))
        {
            self.dirty = true;
            return;
        }
        self.dirty = false;
        self.last_draw = Some(now);
        let line = render(&self.stages);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line:width$}", width = WIDTH + 40);
        let _ = err.flush();
        self.drawn = true;
    }
}

fn render(stages: &BTreeMap<u32, StageProgress>) -> String {
    let width = WIDTH / stages.len().max(1);
    stages
        .iter()
        .filter(|(_, s)| s.total > 0)
        .map(|(id, s)| {
            let header = format!("[Stage {id}:");
            let tail = format!("({} + {}) / {}]", s.done, s.running, s.total);
            let w = width.max(10);
            let filled = (w as u64 * s.done as u64 / s.total.max(1) as u64) as usize;
            let bar = if filled >= w {
                "=".repeat(w)
            } else {
                format!("{}>{}", "=".repeat(filled), " ".repeat(w - filled - 1))
            };
            format!("{header}{bar}{tail}")
        })
        .collect::<Vec<_>>()
        .join("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_throttled_away_is_drawn_by_the_next_tick() {
        let mut p = ProgressBar {
            enabled: true,
            stages: BTreeMap::new(),
            last_draw: None,
            drawn: false,
            dirty: false,
        };
        p.stage_submitted(0, 4);
        assert!(!p.dirty, "the first change is drawn at once");
        p.task_started(0);
        p.task_started(0);
        assert!(p.dirty, "changes within 100 ms wait");
        p.tick();
        assert!(!p.dirty, "a tick draws them");
        assert_eq!(render(&p.stages), render(&p.stages));
        assert!(render(&p.stages).ends_with("(0 + 2) / 4]"));
        p.finish();
    }

    #[test]
    fn renders_like_spark() {
        let mut m = BTreeMap::new();
        m.insert(
            2,
            StageProgress {
                total: 8,
                running: 2,
                done: 5,
            },
        );
        let line = render(&m);
        assert!(line.starts_with("[Stage 2:"), "{line}");
        assert!(line.ends_with("(5 + 2) / 8]"), "{line}");
        assert!(line.contains("=>"), "{line}");
    }
}
