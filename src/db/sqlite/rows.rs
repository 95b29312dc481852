//! How the shared row mapping (`db/rows.rs`) reads a SQLite row: by
//! position, lists as JSON text.

use super::*;

impl Cols for Row<'_> {
    type Error = rusqlite::Error;

    fn col<T: ColValue>(&self, i: usize) -> rusqlite::Result<T> {
        Row::get(self, i)
    }

    fn list(&self, i: usize) -> rusqlite::Result<Vec<String>> {
        Ok(parse_list(&Row::get::<_, String>(self, i)?))
    }

    fn bad(&self, i: usize, why: String) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, why.into())
    }
}
