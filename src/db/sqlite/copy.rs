//! Moving an instance on SQLite (`chatroom admin copy`): tables dumped
//! and loaded row by row, ids kept.

use super::*;

#[async_trait]
impl CopyStore for SqliteStore {
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>> {
        let t = Table::named(table)?;
        let sql = if t.keyed_by_id {
            format!(
                "SELECT {} FROM {} WHERE id > ?1 ORDER BY id LIMIT ?2",
                t.column_list(),
                t.name
            )
        } else {
            format!(
                "SELECT {} FROM {} ORDER BY {} LIMIT ?2 OFFSET ?1",
                t.column_list(),
                t.name,
                t.order_by()
            )
        };
        self.read_blocking(move |c| {
            let mut stmt = c.prepare(&sql)?;
            let mut found = stmt.query(params![after, limit])?;
            let mut out = Vec::new();
            while let Some(r) = found.next()? {
                let mut obj = serde_json::Map::new();
                for (col, ty) in t.columns {
                    let v = match ty {
                        Col::Int => json!(r.get::<_, Option<i64>>(*col)?),
                        Col::Text => json!(r.get::<_, Option<String>>(*col)?),
                        Col::Bool => json!(r.get::<_, Option<bool>>(*col)?),
                        Col::List => {
                            json!(r.get::<_, Option<String>>(*col)?.map(|s| parse_list(&s)))
                        }
                        Col::Json => r
                            .get::<_, Option<String>>(*col)?
                            .map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
                            .unwrap_or(Value::Null),
                        Col::Bytes => json!(r.get::<_, Option<Vec<u8>>>(*col)?.map(|b| {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.encode(b)
                        })),
                    };
                    obj.insert((*col).to_owned(), v);
                }
                out.push(Value::Object(obj));
            }
            Ok(out)
        })
        .await
    }

    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()> {
        use base64::Engine;
        let t = Table::named(table)?;
        let placeholders = (1..=t.columns.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({placeholders})",
            t.name,
            t.column_list()
        );
        // Converted before the transaction, so a bad row changes nothing.
        let mut batch = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(t.columns.len());
            for (col, ty) in t.columns {
                let v = &row[*col];
                let text = |s: Option<String>| s.map(SqlValue::Text).unwrap_or(SqlValue::Null);
                values.push(match ty {
                    Col::Int => v.as_i64().map(SqlValue::Integer).unwrap_or(SqlValue::Null),
                    Col::Text => text(v.as_str().map(str::to_owned)),
                    Col::Bool => v
                        .as_bool()
                        .map(|b| SqlValue::Integer(b.into()))
                        .unwrap_or(SqlValue::Null),
                    Col::List | Col::Json => text((!v.is_null()).then(|| v.to_string())),
                    Col::Bytes => match v.as_str() {
                        Some(s) => SqlValue::Blob(
                            base64::engine::general_purpose::STANDARD
                                .decode(s)
                                .map_err(|e| {
                                    Error::invalid(format!("bad bytes in {table}.{col}: {e}"))
                                })?,
                        ),
                        None => SqlValue::Null,
                    },
                });
            }
            batch.push(values);
        }
        self.write_blocking(move |c| {
            let mut stmt = c.prepare(&sql)?;
            for values in batch {
                stmt.execute(rusqlite::params_from_iter(values))?;
            }
            Ok(())
        })
        .await
    }

    async fn count_rows(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        let sql = format!("SELECT COUNT(*) FROM {}", t.name);
        self.read_blocking(move |c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
            .await
    }

    async fn id_high_water(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(0);
        }
        // AUTOINCREMENT remembers the highest id ever used in sqlite_sequence.
        let sql = format!(
            "SELECT MAX(COALESCE((SELECT MAX(id) FROM {0}), 0), \
             COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{0}'), 0))",
            t.name
        );
        self.read(|c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
    }

    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(());
        }
        self.write(|c| {
            let n = exec(
                c,
                "UPDATE sqlite_sequence SET seq = MAX(seq, ?2) WHERE name = ?1",
                params![t.name, high],
            )?;
            if n == 0 && high > 0 {
                exec(
                    c,
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
                    params![t.name, high],
                )?;
            }
            Ok(())
        })
        .await
    }
}
