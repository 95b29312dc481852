//! The coordination skill through the skills extension (SEP-2640,
//! `io.modelcontextprotocol/skills`): `skill://chatroom/coordination/SKILL.md`.
//!
//! Its text is the Claude Code plugin's skill, compiled in from
//! `plugin/skills/chatroom/SKILL.md` ([`crate::assets::COORDINATION_SKILL`]),
//! so the two cannot drift. The one line that differs is the frontmatter's
//! `name`: the extension names a skill by its URI's last folder
//! (`coordination`), the plugin by its own folder (`chatroom`).

use std::sync::LazyLock;

use rmcp::ErrorData;
use rmcp::model::{
    GetSkillResult, ListSkillsResult, ReadResourceResult, Resource, ResourceContents, Skill,
    SkillFrontmatter, SkillResource, SkillResources,
};

/// The skill's `SKILL.md`.
pub const SKILL_URI: &str = "skill://chatroom/coordination/SKILL.md";
/// The name the URI gives it.
const NAME: &str = "coordination";
const MIME: &str = "text/markdown";

/// The plugin's text with the name its URI gives it.
pub static TEXT: LazyLock<String> = LazyLock::new(|| {
    let plugin = crate::assets::COORDINATION_SKILL;
    plugin.replacen("\nname: chatroom\n", &format!("\nname: {NAME}\n"), 1)
});

/// The frontmatter's `description`, read from the text.
fn description() -> String {
    TEXT.lines()
        .skip(1)
        .take_while(|l| *l != "---")
        .find_map(|l| l.strip_prefix("description: "))
        .unwrap_or("How to work in a chatroom room with other agents.")
        .to_owned()
}

fn skill() -> Skill {
    Skill::new(
        SKILL_URI,
        SkillFrontmatter::new(NAME, description()),
        SkillResources::Files(vec![SkillResource::from_bytes(SKILL_URI, TEXT.as_bytes())]),
    )
}

/// The `SKILL.md` as a resource (`resources/list`).
pub fn resource() -> Resource {
    Resource::new(SKILL_URI, NAME)
        .with_title("chatroom coordination skill")
        .with_description(description())
        .with_mime_type(MIME)
        .with_size(TEXT.len() as u64)
}

/// `skills/list`.
pub fn list() -> ListSkillsResult {
    ListSkillsResult::with_all_items(vec![skill()])
}

/// `skills/get`: the one skill, or invalid params for any other URI.
pub fn get(uri: &str) -> Result<GetSkillResult, ErrorData> {
    if uri != SKILL_URI {
        return Err(ErrorData::invalid_params(
            format!("no skill {uri:?}; this server has {SKILL_URI}"),
            None,
        ));
    }
    Ok(GetSkillResult::new(skill()))
}

/// `resources/read` of the skill's file, if `uri` names it.
pub fn read(uri: &str) -> Option<ReadResourceResult> {
    (uri == SKILL_URI).then(|| {
        ReadResourceResult::new(vec![
            ResourceContents::text(TEXT.as_str(), SKILL_URI).with_mime_type(MIME),
        ])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_the_plugins_but_for_its_name() {
        let plugin = crate::assets::COORDINATION_SKILL;
        assert!(
            TEXT.starts_with("---\nname: coordination\n"),
            "{}",
            &TEXT[..40]
        );
        assert_eq!(
            TEXT.replacen("name: coordination", "name: chatroom", 1),
            plugin
        );
        skill().validate().expect("a valid skill entry");
    }
}
