//! Pages beyond jobs, stages and executors, one file each: the summary quantiles of a
//! stage's tasks (`summary`), cached and checkpointed RDDs (`storage`) and the
//! application's configuration (`environment`), a barrier stage's supersteps
//! (`supersteps`), the running jobs' scheduler pools (`pools`). They use `html`'s frame and escaping.

pub(crate) mod dag_ops;
pub(crate) mod environment;
pub(crate) mod pools;
pub(crate) mod storage;
pub(crate) mod summary;
pub(crate) mod supersteps;
