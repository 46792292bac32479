//! Accumulator updates that cannot be encoded (in the task) or decoded (in the client)
//! fail the job with an error naming the accumulator; they are never counted as zero.

mod common;

use common::*;
use ember::{Accumulator, AccumulatorValue, EmberError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Sums, but refuses to be encoded once the sum passes 100.
#[derive(Clone, Default, Debug, PartialEq)]
struct Unencodable(u64);

impl Serialize for Unencodable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 > 100 {
            return Err(serde::ser::Error::custom(format!(
                "{} is too big to send",
                self.0
            )));
        }
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Unencodable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u64::deserialize(d).map(Unencodable)
    }
}

impl AccumulatorValue for Unencodable {
    fn merge(&mut self, other: Self) {
        self.0 += other.0;
    }
}

/// Sums, but a partial value of 13 does not decode.
#[derive(Clone, Default, Debug, PartialEq, Serialize)]
struct Undecodable(u64);

impl<'de> Deserialize<'de> for Undecodable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(d)?;
        if v == 13 {
            return Err(serde::de::Error::custom("13 is unlucky"));
        }
        Ok(Undecodable(v))
    }
}

impl AccumulatorValue for Undecodable {
    fn merge(&mut self, other: Self) {
        self.0 += other.0;
    }
}

#[test]
fn a_task_value_that_cannot_be_encoded_fails_the_task_naming_the_accumulator() {
    let c = ctx(2);
    let acc: Accumulator<Unencodable> = c.accumulator("too-big");
    // One partition adds 1..=20: its partial value, 210, is over the limit.
    let rdd = c.parallelize((1..=20u64).collect::<Vec<_>>(), 1);
    let err = rdd
        .foreach_with(acc.clone(), |acc, x| acc.add(Unencodable(x)))
        .unwrap_err();
    match &err {
        EmberError::TaskFailed { message, .. } => {
            // (postcard reports a custom serde error without its text.)
            assert!(
                message.starts_with("serialization error (the task's value of accumulator ")
                    && message.contains(" (too-big)): "),
                "{message}"
            );
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    assert_eq!(acc.value(), Unencodable(0), "nothing was counted");
}

#[test]
fn a_counted_update_that_cannot_be_decoded_fails_the_action_instead_of_undercounting() {
    let c = ctx(2);
    let acc: Accumulator<Undecodable> = c.accumulator("unlucky");
    // Partition 0's partial value is 13, partition 1's is 30.
    let rdd = c.parallelize(vec![6u64, 7, 10, 20], 2);
    let err = rdd
        .foreach_with(acc.clone(), |acc, x| acc.add(Undecodable(x)))
        .unwrap_err();
    match &err {
        EmberError::Serialization { what, message } => {
            assert!(
                what.contains("accumulator") && what.contains("(unlucky)"),
                "{what}"
            );
            assert!(what.contains("partition 0"), "{what}");
            assert!(message.contains("Deserialization"), "{message}");
        }
        other => panic!("expected a serialization error, got {other:?}"),
    }
    // The same job with decodable values counts every one.
    let ok: Accumulator<Undecodable> = c.accumulator("lucky");
    c.parallelize(vec![6u64, 8, 10, 20], 2)
        .foreach_with(ok.clone(), |acc, x| acc.add(Undecodable(x)))
        .unwrap();
    assert_eq!(ok.value(), Undecodable(6 + 8 + 10 + 20));
}
