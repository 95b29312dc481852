//! Small shared files: strict base64 in, exact bytes out, a size cap, SHA-256,
//! optional expiry (an expired file is invisible at once) and a task link.

use base64::Engine;
use sha2::{Digest, Sha256};

use serde_json::json;

use crate::domain::model::{EventKind, FileMeta, NewFile};
use crate::domain::{Call, Core, limits};
use crate::error::{Error, Result};

/// The longest expiry: ten years.
const MAX_EXPIRY_HOURS: f64 = 87_600.0;

/// `expires_in_hours` as milliseconds: any positive, finite number of hours
/// up to [`MAX_EXPIRY_HOURS`], a fraction included (`0.5` is half an hour).
fn expiry_ms(hours: f64) -> Result<i64> {
    if !(hours.is_finite() && hours > 0.0 && hours <= MAX_EXPIRY_HOURS) {
        return Err(Error::invalid(format!(
            "expires_in_hours must be a number of hours above 0 and at most {MAX_EXPIRY_HOURS} (fractions allowed); leave it out for no expiry"
        )));
    }
    // At least one millisecond, so a tiny positive value still expires.
    Ok(((hours * 3_600_000.0).round() as i64).max(1))
}

/// Refuses empty, path-like or control-character file names.
pub fn check_name(name: &str) -> Result<()> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    limits::check("name", name, limits::FILE_NAME)?;
    if name.contains(['/', '\\'])
        || name.chars().any(super::names::is_hidden)
        || trimmed == "."
        || trimmed == ".."
    {
        return Err(Error::invalid(
            "name must be a plain file name: no slashes, no control or bidi characters, not . or ..",
        ));
    }
    Ok(())
}

/// Decodes strict base64 (standard alphabet, padded, no whitespace).
pub fn decode_base64(content: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(content)
        .map_err(|e| Error::invalid(format!("content_base64 is not valid base64 ({e})")))
}

pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Core {
    /// Stores a file's bytes; shared by `put_file` and the raw upload route.
    #[allow(clippy::too_many_arguments)]
    pub async fn put_file(
        &self,
        call: &Call,
        room: Option<&str>,
        name: &str,
        content: Vec<u8>,
        mime: Option<&str>,
        expires_in_hours: Option<f64>,
        task_id: Option<i64>,
    ) -> Result<FileMeta> {
        let room = self.writable_room(call, room).await?;
        check_name(name)?;
        if content.is_empty() {
            return Err(Error::invalid("the file is empty; empty files are refused"));
        }
        if content.len() > self.settings.max_file_bytes {
            return Err(Error::TooLarge(format!(
                "the file is {} bytes; the cap is {} bytes (CHATROOM_MAX_FILE_BYTES)",
                content.len(),
                self.settings.max_file_bytes
            )));
        }
        let mime = mime
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or("application/octet-stream");
        limits::check("mime", mime, limits::MIME)?;
        if mime.chars().any(char::is_control) {
            return Err(Error::invalid("mime must not hold control characters"));
        }
        let now = self.clock.now_ms();
        let expires_at = expires_in_hours
            .map(expiry_ms)
            .transpose()?
            .map(|ms| now + ms);
        if let Some(t) = task_id
            && self.store.get_task(&room, t).await?.is_none()
        {
            return Err(Error::not_found(format!(
                "task {t} not found in room {room:?}"
            )));
        }
        let file = NewFile {
            name: name.to_owned(),
            mime: mime.to_owned(),
            sha256: hex::encode(Sha256::digest(&content)),
            content,
            expires_at,
            task_id,
        };
        // The file's id is the store's to assign: `Record::stamp` puts it in.
        let detail = json!({"name": file.name, "size": file.content.len(), "sha256": file.sha256});
        let mut record = call.record(now);
        record.task_id = task_id;
        let record = record.event(EventKind::FileAdded, task_id, None, detail);
        let (meta, event) = self.store.put_file(&room, &file, record).await?;
        call.mark_audited();
        self.bus.publish([event]);
        Ok(meta)
    }

    pub async fn get_file(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
    ) -> Result<(FileMeta, Vec<u8>)> {
        let named = room.is_some_and(|r| !r.trim().is_empty());
        let room = self.room(call, room).await?.name;
        let now = self.clock.now_ms();
        if let Some(found) = self.store.get_file(&room, id, now).await? {
            return Ok(found);
        }
        let not_found = || Error::not_found(format!("file {id} not found in room {room:?}"));
        if named {
            return Err(not_found());
        }
        // File ids are the server's, not a room's: asked without a room,
        // the file is found where it is, if the token may read that room.
        match self.store.file_room(id, now).await? {
            Some(other) if call.granted(&other) => {
                let other = self.room(call, Some(&other)).await?.name;
                self.store
                    .get_file(&other, id, now)
                    .await?
                    .ok_or_else(not_found)
            }
            Some(_) => Err(Error::forbidden(format!(
                "file {id} is in a room this token does not grant"
            ))),
            None => Err(not_found()),
        }
    }

    pub async fn list_files(
        &self,
        call: &Call,
        room: Option<&str>,
        limit: Option<i64>,
    ) -> Result<(String, Vec<FileMeta>)> {
        let room = self.room(call, room).await?.name;
        let limit = limits::clamp_limit(limit, 50, 200);
        Ok((
            room.clone(),
            self.store
                .list_files(&room, limit, self.clock.now_ms())
                .await?,
        ))
    }

    /// The uploader or a room admin deletes a file.
    pub async fn delete_file(&self, call: &Call, room: Option<&str>, id: i64) -> Result<FileMeta> {
        let room = self.writable_room(call, room).await?;
        let meta = self
            .store
            .file_meta(&room, id, self.clock.now_ms())
            .await?
            .ok_or_else(|| Error::not_found(format!("file {id} not found in room {room:?}")))?;
        if meta.author != call.agent && !call.admin {
            return Err(Error::forbidden(
                "only the uploader or a room admin may delete this file",
            ));
        }
        let mut record = call.record(self.clock.now_ms());
        record.task_id = meta.task_id;
        let detail = json!({"file_id": id, "name": meta.name});
        let record = record.event(EventKind::FileDeleted, meta.task_id, None, detail);
        let event = self
            .store
            .delete_file(&room, id, record)
            .await?
            .ok_or_else(|| Error::not_found(format!("file {id} not found in room {room:?}")))?;
        call.mark_audited();
        self.bus.publish([event]);
        Ok(meta)
    }
}
