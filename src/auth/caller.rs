//! The identity of a request, taken from its bearer token and nothing else.

use crate::domain::model::TokenRecord;

/// Who is calling: the agent and the grants of its token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: i64,
    pub agent: String,
    /// The token's default room.
    pub room: String,
    /// Extra rooms granted besides the default one.
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
}

impl Caller {
    /// Whether this token may act in `room` (existence is checked elsewhere).
    pub fn granted(&self, room: &str) -> bool {
        self.all_rooms || self.room == room || self.also_rooms.iter().any(|r| r == room)
    }

    /// Every room named by the token (the default first).
    pub fn rooms(&self) -> Vec<String> {
        let mut rooms = vec![self.room.clone()];
        rooms.extend(self.also_rooms.iter().filter(|r| **r != self.room).cloned());
        rooms
    }

    /// Whether the token may use whole-server admin functions.
    pub fn server_admin(&self) -> bool {
        self.admin && self.all_rooms
    }
}

impl From<TokenRecord> for Caller {
    fn from(t: TokenRecord) -> Caller {
        Caller {
            token_id: t.id,
            agent: t.agent,
            room: t.room,
            also_rooms: t.also_rooms,
            readonly: t.readonly,
            admin: t.admin,
            all_rooms: t.all_rooms,
            lead: t.lead,
            skills: t.skills,
        }
    }
}
