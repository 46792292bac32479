//! What an executor sends on its channel to the driver, batched: each time the gRPC
//! stream asks for a message it takes every message already queued, and runs of task
//! statuses become one `TaskStatuses` message, so a burst of finished tasks costs the
//! driver one message, not one each.
//!
//! Invariants: messages keep their order (a status never overtakes a heartbeat or
//! another status); a batch holds at most `MAX_STATUS_BATCH` statuses and grows past
//! one only while it stays under `BATCH_BYTES` encoded, so it always fits the
//! channel's message limit (each status was bounded by `fit_status`); a lone status
//! goes as `Status`, as before batching.

use std::pin::Pin;
use std::task::{Context, Poll};

use ember_proto::{executor_message, limits, ExecutorMessage, TaskStatus, TaskStatuses};
use futures_util::Stream;
use prost::Message;
use tokio::sync::mpsc;

/// The outbound stream over the executor's queue.
pub struct Batched {
    rx: mpsc::Receiver<ExecutorMessage>,
    /// A message taken while batching that did not join the batch: sent next.
    held: Option<ExecutorMessage>,
}

impl Batched {
    pub fn new(rx: mpsc::Receiver<ExecutorMessage>) -> Self {
        Batched { rx, held: None }
    }
}

impl Stream for Batched {
    type Item = ExecutorMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ExecutorMessage>> {
        let this = self.get_mut();
        let first = match this.held.take() {
            Some(m) => m,
            None => match this.rx.poll_recv(cx) {
                Poll::Ready(Some(m)) => m,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        let status = match first.msg {
            Some(executor_message::Msg::Status(s)) => s,
            other => return Poll::Ready(Some(ExecutorMessage { msg: other })),
        };
        let mut bytes = status.encoded_len();
        let mut batch: Vec<TaskStatus> = vec![status];
        while batch.len() < limits::MAX_STATUS_BATCH {
            let Ok(next) = this.rx.try_recv() else {
                break;
            };
            match next.msg {
                Some(executor_message::Msg::Status(s))
                    if bytes + s.encoded_len() <= limits::BATCH_BYTES =>
                {
                    bytes += s.encoded_len();
                    batch.push(s);
                }
                other => {
                    this.held = Some(ExecutorMessage { msg: other });
                    break;
                }
            }
        }
        let msg = if batch.len() == 1 {
            executor_message::Msg::Status(batch.remove(0))
        } else {
            executor_message::Msg::Statuses(TaskStatuses { statuses: batch })
        };
        Poll::Ready(Some(ExecutorMessage { msg: Some(msg) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_proto::Heartbeat;
    use futures_util::StreamExt;

    fn status(task_id: u64) -> ExecutorMessage {
        ExecutorMessage {
            msg: Some(executor_message::Msg::Status(TaskStatus {
                task_id,
                ..Default::default()
            })),
        }
    }

    fn ids(m: &ExecutorMessage) -> Vec<u64> {
        match &m.msg {
            Some(executor_message::Msg::Status(s)) => vec![s.task_id],
            Some(executor_message::Msg::Statuses(b)) => {
                b.statuses.iter().map(|s| s.task_id).collect()
            }
            _ => vec![],
        }
    }

    #[tokio::test]
    async fn queued_statuses_go_together_in_order_around_other_messages() {
        let (tx, rx) = mpsc::channel(4096);
        for id in 0..3 {
            tx.send(status(id)).await.unwrap();
        }
        let hb = ExecutorMessage {
            msg: Some(executor_message::Msg::Heartbeat(Heartbeat::default())),
        };
        tx.send(hb).await.unwrap();
        let n = limits::MAX_STATUS_BATCH as u64 + 5;
        for id in 10..10 + n {
            tx.send(status(id)).await.unwrap();
        }
        drop(tx);
        let out: Vec<ExecutorMessage> = Batched::new(rx).collect().await;
        assert_eq!(
            out.len(),
            4,
            "3 statuses, the heartbeat, a full batch, the rest"
        );
        assert_eq!(ids(&out[0]), vec![0, 1, 2]);
        assert!(matches!(
            out[1].msg,
            Some(executor_message::Msg::Heartbeat(_))
        ));
        let full = ids(&out[2]);
        assert_eq!(full.len(), limits::MAX_STATUS_BATCH);
        assert_eq!(
            full,
            (10..10 + limits::MAX_STATUS_BATCH as u64).collect::<Vec<_>>()
        );
        assert_eq!(
            ids(&out[3]),
            (10 + limits::MAX_STATUS_BATCH as u64..10 + n).collect::<Vec<_>>()
        );
        // A lone status keeps the plain form.
        let (tx, rx) = mpsc::channel(1);
        tx.send(status(7)).await.unwrap();
        drop(tx);
        let out: Vec<ExecutorMessage> = Batched::new(rx).collect().await;
        assert!(matches!(out[0].msg, Some(executor_message::Msg::Status(_))));
    }
}
