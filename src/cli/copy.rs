//! `chatroom admin copy --from URL --to URL`: moves a whole instance to
//! another database, e.g. from its SQLite file to PostgreSQL when it outgrows
//! one machine. Every table comes along with its ids (rooms, tokens, tasks
//! and their dependencies, notes, messages, mentions, events, cursors,
//! presence, files, audit, admin log), the target's id sequences are moved
//! past the source's, and the row counts of both are compared at the end.
//! The target must be empty; the servers on the source should be stopped,
//! or writes made during the copy may be missed (the counts then differ).

use std::process::ExitCode;

use crate::db::{self, TABLES};
use crate::domain::store::prelude::*;

/// Rows moved per batch; file rows carry their content, so fewer of them.
fn page_size(table: &str) -> i64 {
    if table == "files" { 16 } else { 1000 }
}

/// A database URL from what the user typed (a bare path is a SQLite file).
pub(super) fn url(arg: &str) -> String {
    if arg.contains("://") {
        arg.to_owned()
    } else {
        format!("sqlite://{arg}")
    }
}

pub async fn run(from: &str, to: &str) -> anyhow::Result<ExitCode> {
    let (from, to) = (url(from), url(to));
    if from == to {
        anyhow::bail!("--from and --to name the same database");
    }
    if let Some(path) = from.strip_prefix("sqlite://")
        && !std::path::Path::new(path).exists()
    {
        anyhow::bail!("--from: there is no SQLite file at {path}");
    }
    let source = db::open(&from)
        .await
        .map_err(|e| anyhow::anyhow!("--from: {e:#}"))?;
    let target = db::open(&to)
        .await
        .map_err(|e| anyhow::anyhow!("--to: {e:#}"))?;
    for table in TABLES {
        let n = target.count_rows(table.name).await?;
        if n > 0 {
            anyhow::bail!(
                "--to is not empty ({} holds {n} row(s)): copy only into a new, empty database",
                table.name
            );
        }
    }
    for table in TABLES {
        let n = copy_table(source.as_ref(), target.as_ref(), table).await?;
        eprintln!("copied {n} row(s) of {}", table.name);
    }
    // Verify: every table holds as many rows on both sides.
    let mut same = true;
    println!("{:<12} {:>10} {:>10}", "TABLE", "SOURCE", "TARGET");
    for table in TABLES {
        let (a, b) = (
            source.count_rows(table.name).await?,
            target.count_rows(table.name).await?,
        );
        same &= a == b;
        println!(
            "{:<12} {a:>10} {b:>10}{}",
            table.name,
            if a == b { "" } else { "  MISMATCH" }
        );
    }
    if !same {
        eprintln!(
            "the counts differ: was the source written to during the copy? Stop its servers, \
             empty the target and copy again"
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("copy complete: every row arrived");
    Ok(ExitCode::SUCCESS)
}

/// Copies one table in batches, then moves the target's ids past the source's.
async fn copy_table(
    source: &dyn Store,
    target: &dyn Store,
    table: &db::Table,
) -> anyhow::Result<u64> {
    let page = page_size(table.name);
    let (mut after, mut copied) = (0i64, 0u64);
    loop {
        let rows = source.dump_table(table.name, after, page).await?;
        if rows.is_empty() {
            break;
        }
        target.load_rows(table.name, &rows).await?;
        copied += rows.len() as u64;
        after = if table.keyed_by_id {
            rows.last().and_then(|r| r["id"].as_i64()).unwrap_or(after)
        } else {
            after + rows.len() as i64
        };
        if (rows.len() as i64) < page {
            break;
        }
    }
    target
        .set_id_floor(table.name, source.id_high_water(table.name).await?)
        .await?;
    Ok(copied)
}
