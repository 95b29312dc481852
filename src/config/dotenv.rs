//! The `.env` file: read as docker compose reads it, applied under the
//! process environment (which wins), and warned about line by line
//! (duplicates, unreadable lines, unknown `CHATROOM_*` names). Which file is
//! `CHATROOM_ENV_FILE` (default `.env` in the working directory), so that a
//! container can be pointed at the `.env` compose mounts: its warnings then
//! reach `docker compose logs`, and a value compose passed from it counts as
//! coming from the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variable naming the file (read from the environment only).
pub const ENV_FILE: &str = "CHATROOM_ENV_FILE";

/// What reading the `.env` file found: the values it set and what was
/// wrong with it.
#[derive(Debug, Clone)]
pub struct DotEnv {
    /// The file read, when it exists.
    pub path: Option<PathBuf>,
    /// How warnings and sources name the file: its file name (`.env`).
    pub label: String,
    /// Every variable the file sets, last line winning: name → (value, line).
    pub values: BTreeMap<String, (String, usize)>,
    /// Duplicate, unparsable and unknown lines, each naming its line number,
    /// and the settings the environment overrides.
    pub warnings: Vec<String>,
}

impl Default for DotEnv {
    fn default() -> DotEnv {
        DotEnv {
            path: None,
            label: ".env".into(),
            values: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }
}

/// Where a setting's value comes from, as `chatroom doctor` and the
/// start-up line show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process environment; `over` names the file's line it wins over.
    Environment { over: Option<(String, usize)> },
    /// The file, at this line (read by the server, or passed on by compose
    /// with the same value).
    File { file: String, line: usize },
    /// Neither: the built-in default.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Environment { over: None } => f.write_str("environment"),
            Source::Environment {
                over: Some((file, line)),
            } => write!(f, "environment, over {file} line {line}"),
            Source::File { file, line } => write!(f, "{file} line {line}"),
            Source::Default => f.write_str("default"),
        }
    }
}

static DOTENV: std::sync::OnceLock<DotEnv> = std::sync::OnceLock::new();

/// Reads the `.env` file (`CHATROOM_ENV_FILE`, default `.env` in the working
/// directory) into the process environment when it exists, never overriding
/// a variable that is already set. Call it once, before any thread starts;
/// later calls return the first reading.
pub fn load_dotenv() -> &'static DotEnv {
    DOTENV.get_or_init(|| {
        let named = std::env::var(ENV_FILE)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        let path = PathBuf::from(named.as_deref().unwrap_or(".env"));
        let mut dotenv = read_file(&path, named.is_some(), |name| std::env::var(name).ok());
        if dotenv.path.is_none() {
            return dotenv;
        }
        dotenv
            .warnings
            .extend(overridden(&dotenv, super::in_container()));
        // The values are already parsed and interpolated; hand them to
        // dotenvy (which sets the environment) in a form it reads verbatim.
        let mut clean = String::new();
        for (name, (value, _)) in &dotenv.values {
            if name != ENV_FILE && std::env::var_os(name).is_none() {
                let escaped = value
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('$', "\\$")
                    .replace('\n', "\\n");
                clean.push_str(&format!("{name}=\"{escaped}\"\n"));
            }
        }
        if let Err(e) = dotenvy::from_read(std::io::Cursor::new(clean)) {
            let label = dotenv.label.clone();
            dotenv
                .warnings
                .push(format!("{label}: cannot apply it: {e}"));
        }
        dotenv
    })
}

/// Reads and parses the file at `path`; `named` says `CHATROOM_ENV_FILE`
/// chose it, so that its absence is worth a warning.
fn read_file(path: &Path, named: bool, env: impl Fn(&str) -> Option<String>) -> DotEnv {
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            let warning = if e.kind() != std::io::ErrorKind::NotFound {
                Some(format!("{}: cannot read it: {e}", path.display()))
            } else if named {
                Some(format!(
                    "{ENV_FILE}={}: no such file, so settings come from the environment and the defaults only",
                    path.display()
                ))
            } else {
                None
            };
            return DotEnv {
                label,
                warnings: warning.into_iter().collect(),
                ..DotEnv::default()
            };
        }
    };
    let mut dotenv = parse(&label, &text, env);
    dotenv.path = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()));
    if let Some((value, line)) = dotenv.values.get(ENV_FILE)
        && !value.is_empty()
    {
        dotenv.warnings.push(format!(
            "{label} line {line}: {ENV_FILE} is read from the environment only; in the file it has no effect"
        ));
    }
    dotenv
}

/// A warning for every `CHATROOM_*` setting of the file that the process
/// environment sets to something else (and so wins over). In a container
/// that is compose passing a value from before the file was edited.
fn overridden(dotenv: &DotEnv, in_container: bool) -> Vec<String> {
    let hint = if in_container {
        " (docker compose passes .env on when the container is created: `docker compose up -d` after editing it)"
    } else {
        ""
    };
    dotenv
        .values
        .iter()
        .filter(|(name, _)| name.starts_with("CHATROOM_") && name.as_str() != ENV_FILE)
        .filter_map(|(name, (value, line))| {
            let env = std::env::var(name).ok()?;
            (env != *value).then(|| {
                format!(
                    "{} line {line}: {name} is also set in the environment, to another value, which wins{hint}",
                    dotenv.label
                )
            })
        })
        .collect()
}

/// Where `name`'s value comes from in this process: the file when the
/// environment holds the file's value (set from it, or passed on by
/// compose), the environment when it holds another.
pub fn source_of(name: &str) -> Source {
    let dotenv = load_dotenv();
    let env = std::env::var(name).ok();
    let line = dotenv.values.get(name);
    match (env, line) {
        (Some(env), Some((value, line))) if env == *value => Source::File {
            file: dotenv.label.clone(),
            line: *line,
        },
        (Some(env), line) if !env.trim().is_empty() || line.is_some() => Source::Environment {
            over: line.map(|(_, n)| (dotenv.label.clone(), *n)),
        },
        _ => Source::Default,
    }
}

/// Parses the text of a `.env` file the way docker compose does: `NAME=value`
/// lines (optionally after `export `), `#` comments (inline ones after a
/// space when the value is unquoted), single quotes literal, double quotes
/// with `\` escapes, `${NAME}`, `${NAME:-default}` and `$NAME` expanded in
/// unquoted and double-quoted values (from `env`, then earlier lines), and
/// the last line for a variable winning. A line that cannot be read is
/// warned about and skipped; the lines after it still count.
pub fn parse_dotenv(text: &str, env: impl Fn(&str) -> Option<String>) -> DotEnv {
    parse(".env", text, env)
}

/// [`parse_dotenv`], naming the file `label` in its warnings.
fn parse(label: &str, text: &str, env: impl Fn(&str) -> Option<String>) -> DotEnv {
    let mut out = DotEnv {
        label: label.to_owned(),
        ..DotEnv::default()
    };
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((name, rest)) = line.split_once('=') else {
            out.warnings.push(format!(
                "{label} line {n}: not NAME=value, ignored: {}",
                shorten(line)
            ));
            continue;
        };
        let name = name.trim();
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !name_ok {
            out.warnings.push(format!(
                "{label} line {n}: {:?} is not a variable name, line ignored",
                shorten(name)
            ));
            continue;
        }
        let lookup = |var: &str| env(var).or_else(|| out.values.get(var).map(|(v, _)| v.clone()));
        let value = match dotenv_value(rest.trim_start(), &lookup) {
            Ok(v) => v,
            Err(why) => {
                out.warnings
                    .push(format!("{label} line {n}: {name}: {why}, line ignored"));
                continue;
            }
        };
        if name.starts_with("CHATROOM_") && !super::is_known_variable(name) {
            let hint = closest(name)
                .map(|c| format!(" (did you mean {c}?)"))
                .unwrap_or_default();
            out.warnings.push(format!(
                "{label} line {n}: {name} is not a chatroom setting{hint}; it has no effect"
            ));
        }
        if let Some((_, first)) = out.values.get(name) {
            out.warnings.push(format!(
                "{label} line {n}: {name} is set again (also on line {first}); the last line wins, as in docker compose"
            ));
        }
        out.values.insert(name.to_owned(), (value, n));
    }
    out
}

/// One value of a `.env` line (the text after `=`).
fn dotenv_value(rest: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let after_quote = |tail: &str| -> Result<(), String> {
        let tail = tail.trim();
        if tail.is_empty() || tail.starts_with('#') {
            Ok(())
        } else {
            Err(format!("text after the closing quote: {}", shorten(tail)))
        }
    };
    if let Some(body) = rest.strip_prefix('\'') {
        let end = body
            .find('\'')
            .ok_or("the single quote is not closed on this line")?;
        after_quote(&body[end + 1..])?;
        return Ok(body[..end].to_owned());
    }
    if let Some(body) = rest.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    after_quote(&body[i + 1..])?;
                    return expand(&value, lookup);
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('$') => value.push_str("$$"),
                    Some(e) => value.push(e),
                    None => break,
                },
                '$' => value.push('$'),
                c => value.push(c),
            }
        }
        return Err("the double quote is not closed on this line".into());
    }
    // Unquoted: a comment starts at a `#` after whitespace.
    let mut end = rest.len();
    let bytes = rest.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            end = i;
            break;
        }
    }
    expand(rest[..end].trim(), lookup)
}

/// Expands `${NAME}`, `${NAME:-default}`, `${NAME-default}` and `$NAME`;
/// `$$` stands for a literal `$`.
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(tail) = rest.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = rest.strip_prefix('{') {
            let close = tail.find('}').ok_or("a ${ is not closed")?;
            let inner = &tail[..close];
            let (name, default, if_empty) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d), true),
                None => match inner.split_once('-') {
                    Some((n, d)) => (n, Some(d), false),
                    None => (inner, None, false),
                },
            };
            let value = lookup(name);
            let value = match (value, default) {
                (Some(v), Some(d)) if if_empty && v.is_empty() => d.to_owned(),
                (Some(v), _) => v,
                (None, Some(d)) => d.to_owned(),
                (None, None) => String::new(),
            };
            out.push_str(&value);
            rest = &tail[close + 1..];
        } else {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if len == 0 {
                out.push('$');
            } else {
                out.push_str(&lookup(&rest[..len]).unwrap_or_default());
            }
            rest = &rest[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The known variable nearest to a misspelt one, when it is near enough.
fn closest(name: &str) -> Option<&'static str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    };
    super::known_variables()
        .map(|v| (distance(name, v), v))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, v)| v)
}

/// A line or value cut to a readable length for a warning.
fn shorten(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dotenv(text: &str) -> DotEnv {
        parse_dotenv(text, |name| (name == "FROM_ENV").then(|| "env".to_owned()))
    }

    fn value(d: &DotEnv, name: &str) -> Option<String> {
        d.values.get(name).map(|(v, _)| v.clone())
    }

    /// The one warning `d` gave (there must be exactly one), and whether
    /// it says every one of `words`.
    fn one_warning_saying(d: &DotEnv, words: &[&str]) -> bool {
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        words.iter().all(|w| d.warnings[0].contains(w))
    }

    /// The last line for a variable wins, as in docker compose, and the
    /// duplicate is warned about with both line numbers.
    #[test]
    fn dotenv_last_line_wins_with_a_warning() {
        let d = dotenv(
            "CHATROOM_ALLOWED_HOSTS=localhost\n# a comment\nCHATROOM_ALLOWED_HOSTS=box,localhost\n",
        );
        assert_eq!(
            value(&d, "CHATROOM_ALLOWED_HOSTS").as_deref(),
            Some("box,localhost")
        );
        assert_eq!(d.values["CHATROOM_ALLOWED_HOSTS"].1, 3);
        let words = ["line 3", "line 1"];
        assert!(one_warning_saying(&d, &words), "{:?}", d.warnings);
    }

    /// A line that cannot be read is named by number and skipped; the lines
    /// after it still count.
    #[test]
    fn dotenv_bad_line_does_not_drop_the_rest() {
        let d = dotenv(
            "CHATROOM_LOG=debug\nCHATROOM_DB=\"unclosed\nnot a line\n9X=1\nCHATROOM_LISTEN=0.0.0.0:9000\n",
        );
        assert_eq!(value(&d, "CHATROOM_LOG").as_deref(), Some("debug"));
        assert_eq!(
            value(&d, "CHATROOM_LISTEN").as_deref(),
            Some("0.0.0.0:9000")
        );
        assert!(value(&d, "CHATROOM_DB").is_none());
        let joined = d.warnings.join("\n");
        for n in ["line 2", "line 3", "line 4"] {
            assert!(joined.contains(n), "{joined}");
        }
        assert_eq!(d.warnings.len(), 3, "{joined}");
    }

    /// Unknown CHATROOM_* names are warned about with the nearest known
    /// one; other programs' variables are not.
    #[test]
    fn dotenv_unknown_names_are_warned_about() {
        let d = dotenv(
            "CHATROOM_ALLOWED_HOST=box\nPOSTGRES_PASSWORD=x\nCHATROOM_TEST_PG_URL=y\nCHATROOM_PORT=8080\n",
        );
        let words = ["line 1", "CHATROOM_ALLOWED_HOSTS"];
        assert!(one_warning_saying(&d, &words), "{:?}", d.warnings);
    }

    /// Quotes, inline comments, `export` and interpolation read as compose
    /// reads them.
    #[test]
    fn dotenv_values_read_as_compose_reads_them() {
        let d = dotenv(concat!(
            "export A=plain # comment\n",
            "B='single $A # kept'\n",
            "C=\"double $A \\\"q\\\" \\$A\" # comment\n",
            "D=${FROM_ENV}-${MISSING:-fallback}-$A\n",
            "E=a#b\n",
            "F=\n",
        ));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert_eq!(value(&d, "A").as_deref(), Some("plain"));
        assert_eq!(value(&d, "B").as_deref(), Some("single $A # kept"));
        assert_eq!(value(&d, "C").as_deref(), Some("double plain \"q\" $A"));
        assert_eq!(value(&d, "D").as_deref(), Some("env-fallback-plain"));
        assert_eq!(value(&d, "E").as_deref(), Some("a#b"));
        assert_eq!(value(&d, "F").as_deref(), Some(""));
    }

    /// A file named by CHATROOM_ENV_FILE that is missing is warned about;
    /// `.env` missing is not; a CHATROOM_ENV_FILE line in the file is.
    #[test]
    fn the_env_file_is_named_in_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("chatroom.env");
        assert!(read_file(&missing, false, |_| None).warnings.is_empty());
        let named = read_file(&missing, true, |_| None);
        assert!(
            named.warnings[0].contains("CHATROOM_ENV_FILE"),
            "{:?}",
            named.warnings
        );
        std::fs::write(&missing, "CHATROOM_ENV_FILE=other\nCHATROOM_LGO=debug\n").unwrap();
        let read = read_file(&missing, true, |_| None);
        assert_eq!(read.label, "chatroom.env");
        let joined = read.warnings.join("\n");
        assert!(
            joined.contains(
                "chatroom.env line 1: CHATROOM_ENV_FILE is read from the environment only"
            ),
            "{joined}"
        );
        assert!(
            joined.contains("chatroom.env line 2: CHATROOM_LGO"),
            "{joined}"
        );
    }
}
