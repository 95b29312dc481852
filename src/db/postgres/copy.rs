//! Moving an instance on PostgreSQL (`chatroom admin copy`): tables
//! dumped and loaded row by row, ids kept and sequences set past them.

use super::*;

#[async_trait]
impl CopyStore for PostgresStore {
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>> {
        let t = Table::named(table)?;
        let select = t
            .columns
            .iter()
            .map(|(c, ty)| match ty {
                Col::Json => format!("{c}::text AS {c}"),
                _ => (*c).to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = if t.keyed_by_id {
            format!("SELECT {select} FROM {table} WHERE id > $1 ORDER BY id LIMIT $2")
        } else {
            format!(
                "SELECT {select} FROM {table} ORDER BY {} OFFSET $1 LIMIT $2",
                t.order_by()
            )
        };
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut obj = Map::new();
            for (c, ty) in t.columns {
                let v = match ty {
                    Col::Int => json!(r.try_get::<Option<i64>, _>(*c)?),
                    Col::Text => json!(r.try_get::<Option<String>, _>(*c)?),
                    Col::Bool => json!(r.try_get::<Option<bool>, _>(*c)?),
                    Col::List => json!(r.try_get::<Option<Vec<String>>, _>(*c)?),
                    Col::Json => r
                        .try_get::<Option<String>, _>(*c)?
                        .map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
                        .unwrap_or(Value::Null),
                    Col::Bytes => json!(
                        r.try_get::<Option<Vec<u8>>, _>(*c)?
                            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
                    ),
                };
                obj.insert((*c).to_owned(), v);
            }
            out.push(Value::Object(obj));
        }
        Ok(out)
    }

    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()> {
        let t = Table::named(table)?;
        let placeholders = t
            .columns
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| match ty {
                Col::Json => format!("${}::jsonb", i + 1),
                _ => format!("${}", i + 1),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({placeholders})",
            t.column_list()
        );
        let mut tx = self.pool.begin().await?;
        for row in rows {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for (c, ty) in t.columns {
                let v = &row[*c];
                q = match ty {
                    Col::Int => q.bind(v.as_i64()),
                    Col::Text => q.bind(v.as_str().map(str::to_owned)),
                    Col::Bool => q.bind(v.as_bool()),
                    Col::List => q.bind(serde_json::from_value::<Vec<String>>(v.clone()).ok()),
                    Col::Json => q.bind((!v.is_null()).then(|| v.to_string())),
                    Col::Bytes => q.bind(
                        v.as_str()
                            .map(|s| base64::engine::general_purpose::STANDARD.decode(s))
                            .transpose()
                            .map_err(|e| {
                                Error::invalid(format!("bad bytes in {table}.{c}: {e}"))
                            })?,
                    ),
                };
            }
            q.execute(&mut *tx).await.map_err(text_error)?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn count_rows(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        Ok(
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {}", t.name)))
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn id_high_water(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(0);
        }
        // The sequence's last value counts only once it was used.
        Ok(sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM {0}), 0), \
             COALESCE((SELECT last_value FROM pg_sequences \
                       WHERE schemaname || '.' || sequencename = pg_get_serial_sequence('{0}', 'id')), 0))",
            t.name
        )))
        .fetch_one(&self.pool)
        .await?)
    }

    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(());
        }
        let high = high.max(self.id_high_water(table).await?);
        sqlx::query(AssertSqlSafe(format!(
            "SELECT setval(pg_get_serial_sequence('{}', 'id'), GREATEST($1, 1), $1 > 0)",
            t.name
        )))
        .bind(high)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
