//! The settings as read: every row of the [table](super::table) checked
//! against the environment in one pass (so a bad start names every bad
//! variable), then the rules that tie two settings together. [`Values`]
//! hands the checked text to [`Config`](super::Config) through typed
//! getters, and shows it (secrets hidden) for the start-up line and
//! `chatroom doctor`.

use std::collections::HashMap;

use super::table::{Kind, SETTINGS, Setting, Shown, setting};
use super::{ConfigError, redact_url};

/// Every setting's value, checked: the environment's text as the server
/// will use it, or the default; empty for a setting left unset.
#[derive(Debug, Clone)]
pub struct Values {
    values: Vec<(&'static Setting, String)>,
}

impl Values {
    /// Checks every setting of the table in `vars`; the error lists every
    /// bad variable, each named.
    pub fn read(vars: &HashMap<String, String>) -> Result<Values, ConfigError> {
        let mut errors = Vec::new();
        let mut values = Vec::with_capacity(SETTINGS.len());
        for s in SETTINGS {
            let raw = vars.get(s.name).map(|v| v.trim()).filter(|v| !v.is_empty());
            let value = match raw.map(|v| s.kind.check(v)) {
                Some(Ok(v)) => v,
                Some(Err(why)) => {
                    errors.push(format!("{}: {why}", s.name));
                    default(s)
                }
                None => default(s),
            };
            values.push((s, value));
        }
        let values = Values { values };
        errors.extend(values.cross_checks());
        if errors.is_empty() {
            Ok(values)
        } else {
            Err(ConfigError(
                errors.into_iter().map(|e| format!("  {e}")).collect(),
            ))
        }
    }

    /// The rules no single setting can check.
    fn cross_checks(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.optional("CHATROOM_MQTT_HOST").is_some()
            && self.switch("CHATROOM_MQTT_TLS")
            && !super::TLS_BUILT_IN
        {
            errors.push(format!("CHATROOM_MQTT_TLS: {}", super::NO_TLS));
        }
        errors
    }

    /// Each setting with its value as it may be shown: a secret only as
    /// `***` when set, a URL's password as `***`.
    pub fn shown(&self) -> Vec<(&'static Setting, String)> {
        self.values
            .iter()
            .map(|(s, v)| {
                let shown = match s.shown {
                    Shown::Plain => v.clone(),
                    Shown::Secret if v.is_empty() => String::new(),
                    Shown::Secret => "***".into(),
                    Shown::WithoutPassword => redact_url(v),
                };
                (*s, shown)
            })
            .collect()
    }

    /// The checked text of `name`. Panics when `name` is not in the table
    /// or is not of the kind `expect` says (a mistake the defaults test finds).
    fn text(&self, name: &str, expect: fn(&Kind) -> bool) -> &str {
        let row = setting(name).unwrap_or_else(|| panic!("{name} is not in the settings table"));
        assert!(expect(&row.kind), "{name} is not read that way");
        self.values
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    pub fn switch(&self, name: &str) -> bool {
        self.text(name, |k| matches!(k, Kind::Switch)) == "on"
    }

    /// A number setting as `T` (its range in the table fits `T`).
    pub fn number<T: TryFrom<u64>>(&self, name: &str) -> T {
        let n: u64 = self
            .text(name, |k| matches!(k, Kind::Number { .. }))
            .parse()
            .expect("checked");
        T::try_from(n).unwrap_or_else(|_| panic!("{name}'s range does not fit its field"))
    }

    /// A text, URL, choice or checked setting; `None` when unset.
    pub fn optional(&self, name: &str) -> Option<String> {
        Some(self.text(name, |k| !matches!(k, Kind::List(_))))
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    /// A setting with a default (unset only if the table gives none).
    pub fn string(&self, name: &str) -> String {
        self.optional(name).unwrap_or_default()
    }

    /// A setting whose checked text parses as `T` (an address).
    pub fn parsed<T: std::str::FromStr>(&self, name: &str) -> T {
        self.text(name, |k| matches!(k, Kind::Custom(_)))
            .parse()
            .unwrap_or_else(|_| panic!("{name} was checked"))
    }

    /// A list setting's entries, as checked.
    pub fn list(&self, name: &str) -> Vec<String> {
        super::parse::split_list(self.text(name, |k| matches!(k, Kind::List(_))))
            .map(str::to_owned)
            .collect()
    }
}

/// A setting's default as the server uses it.
fn default(s: &Setting) -> String {
    if s.default.is_empty() {
        return String::new();
    }
    s.kind
        .check(s.default)
        .unwrap_or_else(|why| panic!("the default of {} is bad: {why}", s.name))
}

/// One setting as the server runs with it: the value as it may be shown
/// and where it came from.
#[derive(Debug, Clone)]
pub struct Effective {
    pub setting: &'static Setting,
    pub shown: String,
    pub source: super::Source,
}

impl Values {
    /// Every setting with its shown value and its source in this process
    /// (the environment, the `.env` file, the default).
    pub fn effective(&self) -> Vec<Effective> {
        self.shown()
            .into_iter()
            .map(|(setting, shown)| Effective {
                setting,
                shown,
                source: super::source_of(setting.name),
            })
            .collect()
    }
}
