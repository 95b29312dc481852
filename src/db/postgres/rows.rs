//! How the PostgreSQL areas run a statement and read its rows: the
//! arguments bound in order from tuples ([`Args`]), each row read as a
//! model by the mapping both backends share (`db/rows.rs`), from a
//! [`PgRow`] by position with lists as `TEXT[]`. Errors stay `sqlx`'s, so
//! each call maps them as it did (`text_error` where the statement writes
//! text).

use sqlx::postgres::PgArguments;
use sqlx::{Encode, Executor, Postgres, SqlSafeStr, Type};

use super::*;

impl Cols for PgRow {
    type Error = sqlx::Error;

    fn col<T: ColValue>(&self, i: usize) -> sqlx::Result<T> {
        self.try_get(i)
    }

    fn list(&self, i: usize) -> sqlx::Result<Vec<String>> {
        self.try_get(i)
    }

    fn bad(&self, i: usize, why: String) -> sqlx::Error {
        sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: why.into(),
        }
    }
}

type Query<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// A statement's arguments, bound in order (`$1`, `$2`, …).
/// (`'t` is how long the values are borrowed: they are encoded as bound.)
pub(super) trait Args<'t>: Sized {
    fn bind_to(self, q: Query<'_>) -> Query<'_>;

    /// These arguments, then `next`'s.
    fn then<B: Args<'t>>(self, next: B) -> Then<Self, B> {
        Then(self, next)
    }
}

/// Two lists of arguments, one after the other.
pub(super) struct Then<A, B>(A, B);

impl<'t, A: Args<'t>, B: Args<'t>> Args<'t> for Then<A, B> {
    fn bind_to(self, q: Query<'_>) -> Query<'_> {
        self.1.bind_to(self.0.bind_to(q))
    }
}

impl Args<'_> for () {
    fn bind_to(self, q: Query<'_>) -> Query<'_> {
        q
    }
}

/// `Args` for a tuple of values PostgreSQL encodes: `(a, b, …)` binds `a`
/// as `$1`, `b` as `$2`, and so on.
macro_rules! tuple_args {
    ($($v:ident),+) => {
        impl<'t, $($v),+> Args<'t> for ($($v,)+)
        where
            $($v: Encode<'t, Postgres> + Type<Postgres>),+
        {
            #[allow(non_snake_case)]
            fn bind_to(self, q: Query<'_>) -> Query<'_> {
                let ($($v,)+) = self;
                q$(.bind($v))+
            }
        }
    };
}

tuple_args!(A);
tuple_args!(A, B);
tuple_args!(A, B, C);
tuple_args!(A, B, C, D);
tuple_args!(A, B, C, D, E);
tuple_args!(A, B, C, D, E, F);
tuple_args!(A, B, C, D, E, F, G);
tuple_args!(A, B, C, D, E, F, G, H);
tuple_args!(A, B, C, D, E, F, G, H, I);
tuple_args!(A, B, C, D, E, F, G, H, I, J);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L);

/// Runs `sql` with `args` on `db`; the rows it changed.
pub(super) async fn exec<'e>(
    db: impl Executor<'e, Database = Postgres>,
    sql: impl SqlSafeStr,
    args: impl Args<'_>,
) -> sqlx::Result<u64> {
    let done = args.bind_to(sqlx::query(sql)).execute(db).await?;
    Ok(done.rows_affected())
}

/// Runs `sql` with `args` on `db`; every row, each read as a `T`.
pub(super) async fn fetch_all<'e, T: FromCols>(
    db: impl Executor<'e, Database = Postgres>,
    sql: impl SqlSafeStr,
    args: impl Args<'_>,
) -> sqlx::Result<Vec<T>> {
    let rows = args.bind_to(sqlx::query(sql)).fetch_all(db).await?;
    rows.iter().map(T::from_cols).collect()
}

/// [`fetch_all`] for a statement that returns at most one row (by a key,
/// with `LIMIT 1`, or one `RETURNING` row): that row, if any.
pub(super) async fn fetch_opt<'e, T: FromCols>(
    db: impl Executor<'e, Database = Postgres>,
    sql: impl SqlSafeStr,
    args: impl Args<'_>,
) -> sqlx::Result<Option<T>> {
    let found: Vec<T> = fetch_all(db, sql, args).await?;
    Ok(found.into_iter().next())
}

/// [`fetch_opt`] for a statement that always returns a row (an aggregate,
/// an `INSERT … RETURNING`).
pub(super) async fn fetch_one<'e, T: FromCols>(
    db: impl Executor<'e, Database = Postgres>,
    sql: impl SqlSafeStr,
    args: impl Args<'_>,
) -> sqlx::Result<T> {
    fetch_opt(db, sql, args)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// The columns of a grant, in the order every table stores them: `agent,
/// room, also_rooms, readonly, admin, all_rooms, lead, skills`.
pub(super) fn grant_args(g: &Grant) -> impl Args<'_> {
    (
        &g.agent,
        &g.room,
        &g.also_rooms,
        g.readonly,
        g.admin,
        g.all_rooms,
        g.lead,
        &g.skills,
    )
}

/// A page read with the room's latest id (`l.latest LEFT JOIN LATERAL` the
/// page): every row carries `latest` first and the page's columns after
/// it, and an empty page is one row whose `id` is NULL.
pub(super) fn page_with_latest<T: FromCols>(rows: &[PgRow]) -> sqlx::Result<(Vec<T>, i64)> {
    let latest = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
    let mut page = Vec::with_capacity(rows.len());
    for r in rows {
        if r.try_get::<Option<i64>, _>(1)?.is_some() {
            page.push(T::from_cols(&At(r, 1))?);
        }
    }
    Ok((page, latest))
}
