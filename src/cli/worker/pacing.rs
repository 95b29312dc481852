//! The worker's brakes, as plain bookkeeping over instants the caller passes
//! in (so they are tested without a clock): the rolling cap on model calls,
//! and per-task failure counts with their cool-down and give-up.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// At most `max` model calls in any `window` (an hour in production).
/// Every attempt counts, failed and cancelled ones included.
#[derive(Debug)]
pub struct CallCap {
    max: usize,
    window: Duration,
    calls: VecDeque<Instant>,
}

impl CallCap {
    pub fn new(max: u32, window: Duration) -> CallCap {
        CallCap {
            max: max.max(1) as usize,
            window,
            calls: VecDeque::new(),
        }
    }

    /// `None` when a call may start at `now`; otherwise when the oldest
    /// counted call leaves the window.
    pub fn next_free(&mut self, now: Instant) -> Option<Instant> {
        while let Some(&t) = self.calls.front() {
            if now.duration_since(t) >= self.window {
                self.calls.pop_front();
            } else {
                break;
            }
        }
        if self.calls.len() < self.max {
            None
        } else {
            self.calls.front().map(|&t| t + self.window)
        }
    }

    /// Counts a call that starts at `now`.
    pub fn record(&mut self, now: Instant) {
        self.calls.push_back(now);
    }
}

/// What a failure means for the task's future.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again once the cool-down has passed; `count` failures so far.
    CoolDown { count: u32 },
    /// The last allowed failure: never try this task again in this run.
    GiveUp { count: u32 },
}

/// Failure counts per task id, kept for the life of the process.
#[derive(Debug)]
pub struct Failures {
    cooldown: Duration,
    max: u32,
    tasks: HashMap<i64, Failed>,
}

#[derive(Debug)]
struct Failed {
    count: u32,
    last: Instant,
}

impl Failures {
    pub fn new(cooldown: Duration, max: u32) -> Failures {
        Failures {
            cooldown,
            max: max.max(1),
            tasks: HashMap::new(),
        }
    }

    /// Whether task `id` may be tried at `now`: never given up on and not
    /// cooling down.
    pub fn may_try(&self, id: i64, now: Instant) -> bool {
        match self.tasks.get(&id) {
            None => true,
            Some(f) => f.count < self.max && now.duration_since(f.last) >= self.cooldown,
        }
    }

    /// Records a failure of task `id` at `now`.
    pub fn record(&mut self, id: i64, now: Instant) -> AfterFailure {
        let f = self.tasks.entry(id).or_insert(Failed {
            count: 0,
            last: now,
        });
        f.count += 1;
        f.last = now;
        if f.count >= self.max {
            AfterFailure::GiveUp { count: f.count }
        } else {
            AfterFailure::CoolDown { count: f.count }
        }
    }

    /// Forgets task `id` once it succeeded.
    pub fn forget(&mut self, id: i64) {
        self.tasks.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    /// The cap rolls: a call frees its slot exactly one window after it started.
    #[test]
    fn cap_rolls_over_the_window() {
        let t0 = Instant::now();
        let mut cap = CallCap::new(2, HOUR);
        assert_eq!(cap.next_free(t0), None);
        cap.record(t0);
        cap.record(t0 + Duration::from_secs(600));
        assert_eq!(
            cap.next_free(t0 + Duration::from_secs(700)),
            Some(t0 + HOUR)
        );
        assert_eq!(cap.next_free(t0 + HOUR), None);
        cap.record(t0 + HOUR);
        assert_eq!(
            cap.next_free(t0 + HOUR),
            Some(t0 + Duration::from_secs(600) + HOUR)
        );
    }

    /// A failed task waits out its cool-down, and is dropped after `max` failures.
    #[test]
    fn failures_cool_down_then_give_up() {
        let t0 = Instant::now();
        let cool = Duration::from_secs(900);
        let mut f = Failures::new(cool, 2);
        assert!(f.may_try(7, t0));
        assert_eq!(f.record(7, t0), AfterFailure::CoolDown { count: 1 });
        assert!(!f.may_try(7, t0 + cool - Duration::from_secs(1)));
        assert!(f.may_try(8, t0), "other tasks are not affected");
        assert!(f.may_try(7, t0 + cool));
        assert_eq!(f.record(7, t0 + cool), AfterFailure::GiveUp { count: 2 });
        assert!(!f.may_try(7, t0 + cool * 100));
        f.forget(7);
        assert!(f.may_try(7, t0 + cool * 100));
    }
}
