//! Uncorrelated scalar subqueries (`x > (select avg(..) from ..)`), which DataFusion
//! plans as a `ScalarSubqueryExec` whose input's expressions read the subqueries' values
//! from a shared slot filled when it executes.
//!
//! ember runs each subquery first, as a query of its own on ember's stages ([`resolve`]),
//! and replaces its plan by a one-row plan of the value (a literal over a placeholder
//! row). Every stage fragment cut from below such a node is then wrapped in a
//! `ScalarSubqueryExec` with those one-row plans ([`Scope::wrap`]), so the fragment's
//! expressions find their values in its own task, through DataFusion's own mechanism.
//!
//! Invariant: a subquery runs once per query, before any stage that reads it; its value
//! is what DataFusion's executor would compute (no row: NULL; more than one row: the
//! query fails with DataFusion's error).

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::scalar_subquery::{ScalarSubqueryExec, ScalarSubqueryLink};
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};

use crate::context::SqlContext;
use crate::error::{Result, SqlError};

/// A resolved `ScalarSubqueryExec`: its one-row plans and its results container.
#[derive(Clone)]
pub struct Scope {
    links: Vec<ScalarSubqueryLink>,
    results: datafusion::logical_expr::physical_planning_context::ScalarSubqueryResults,
}

impl Scope {
    /// The scope of a resolved node (one whose subqueries are one-row plans).
    pub fn of(node: &ScalarSubqueryExec) -> Self {
        Scope {
            links: node.subqueries().to_vec(),
            results: node.results().clone(),
        }
    }

    /// `fragment` evaluated with this scope's values.
    pub fn wrap(&self, fragment: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        Arc::new(ScalarSubqueryExec::new(
            fragment,
            self.links.clone(),
            self.results.clone(),
        ))
    }
}

/// `plan` with every scalar subquery run on ember and replaced by its value's one-row
/// plan (inner subqueries first).
pub fn resolve(sql: &SqlContext, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(node) = plan.downcast_ref::<ScalarSubqueryExec>() else {
        let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
        let mut resolved = Vec::with_capacity(children.len());
        for c in children {
            resolved.push(resolve(sql, c)?);
        }
        return Ok(replace_children_if_necessary(plan, resolved)?);
    };
    let input = resolve(sql, node.input().clone())?;
    let mut links = Vec::with_capacity(node.subqueries().len());
    for link in node.subqueries() {
        let value = value_of(sql, link.plan.clone())?;
        links.push(ScalarSubqueryLink {
            plan: one_row(value, &link.plan.schema().field(0).name().clone())?,
            index: link.index,
        });
    }
    Ok(Arc::new(ScalarSubqueryExec::new(
        input,
        links,
        node.results().clone(),
    )))
}

/// The value of a scalar subquery's plan, run on ember.
fn value_of(sql: &SqlContext, plan: Arc<dyn ExecutionPlan>) -> Result<ScalarValue> {
    let field = plan.schema().field(0).clone();
    let batches = sql.run(plan)?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows > 1 {
        return Err(SqlError::DataFusion(
            datafusion::error::DataFusionError::Execution(
                "Scalar subquery returned more than one row".into(),
            ),
        ));
    }
    match batches.iter().find(|b| b.num_rows() == 1) {
        Some(b) => Ok(ScalarValue::try_from_array(b.column(0), 0)?),
        None => Ok(ScalarValue::try_from(field.data_type())?),
    }
}

/// One row holding `value` (as column `name`).
fn one_row(value: ScalarValue, name: &str) -> Result<Arc<dyn ExecutionPlan>> {
    let row: Arc<dyn ExecutionPlan> = Arc::new(PlaceholderRowExec::new(Arc::new(Schema::empty())));
    let expr = ProjectionExpr {
        expr: Arc::new(Literal::new(value)),
        alias: name.to_string(),
    };
    Ok(Arc::new(ProjectionExec::try_new(vec![expr], row)?))
}
