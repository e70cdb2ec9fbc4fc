//! Who calls the job API: the users file (a user a line: a name, a role, the
//! SHA-256 of the user's token, a fair-share weight and quotas), the client
//! token as the admin user `admin`, and the gate that tells each call's user
//! from its bearer token.
//!
//! The file holds no token, only its SHA-256: tokens are random secrets of a
//! machine's making (not passwords), so a fast hash is as good as a slow one,
//! and a stolen file lets nobody in. A call's token is hashed and looked up;
//! the lookup's timing depends on the hash, which tells nothing of the token.
//!
//! *Invariants:* no two users share a name or a token; no user's token is the
//! worker's or the scaler's; a file that breaks one is refused whole, at start
//! and at a reload (the users before it keep serving).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::{CoordinatorError, Result};

/// The name of the user the client token (`--token-file`, `TALLY_TOKEN`)
/// stands for, and of everyone on a coordinator without tokens. Jobs stored
/// before jobs had owners are this user's.
pub const ADMIN: &str = "admin";

/// The most users a file may hold: each is a label of the per-user metrics.
pub const MAX_USERS: usize = 1000;

/// The largest users file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The largest fair-share weight.
pub const MAX_WEIGHT: u32 = 10_000;

/// What a user may do beyond their own jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sees, cancels and deletes every job, and reads the audit log.
    Admin,
    /// Changes only their own jobs.
    User,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }
}

/// A user's limits; `None`: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    /// Shards of their jobs leased at once, across the cluster.
    pub slots: Option<u32>,
    /// Jobs queued or running at once.
    pub queued_jobs: Option<u32>,
    /// Stage data their unfinished jobs hold; a submission past it is refused.
    pub stage_bytes: Option<u64>,
}

/// One user of the job API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// Their share of the slots against the other users with work (1 to
    /// [`MAX_WEIGHT`]).
    pub weight: u32,
    pub quotas: Quotas,
}

impl User {
    /// The admin the client token stands for: no quota, weight 1.
    pub fn admin() -> User {
        User {
            name: ADMIN.into(),
            role: Role::Admin,
            weight: 1,
            quotas: Quotas::default(),
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The weight of a job owner not in the file (a user since removed).
    pub fn removed(name: &str) -> User {
        User {
            name: name.into(),
            role: Role::User,
            weight: 1,
            quotas: Quotas::default(),
        }
    }
}

/// Who sees which jobs (`tally coordinator --jobs-visible`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Visibility {
    /// Every user sees (gets, lists, watches, reads the result of) every job.
    #[default]
    All,
    /// A user sees only their own jobs; an admin sees all.
    Own,
}

/// The users a coordinator knows at one time.
#[derive(Debug)]
pub struct Users {
    /// `false`: no client token and no users file, so the job API is open
    /// and every caller is the admin.
    closed: bool,
    by_token: HashMap<[u8; 32], Arc<User>>,
    by_name: BTreeMap<String, Arc<User>>,
    /// The worker token's hash: presented to the job API, it is refused as
    /// the wrong kind of credential rather than as an unknown one.
    worker_token: Option<[u8; 32]>,
    pub visibility: Visibility,
}

/// The SHA-256 of a token, as the users file holds it.
pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A token's SHA-256 as the users file writes it: `sha256:` and 64 hex digits.
pub fn token_hash_text(token: &str) -> String {
    let hex: String = token_sha256(token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Where the users come from: the client token, the users file, and the
/// tokens no user may have.
#[derive(Clone, Debug, Default)]
pub struct UsersSource {
    pub client_token: Option<String>,
    pub worker_token: Option<String>,
    pub scaler_token: Option<String>,
    pub file: Option<PathBuf>,
    pub visibility: Visibility,
}

impl UsersSource {
    /// Reads and checks the users file (if any) and joins it to the client
    /// token's admin.
    pub fn load(&self) -> Result<Users> {
        let text = match &self.file {
            None => None,
            Some(path) => Some(read_file(path)?),
        };
        let shown = self
            .file
            .as_deref()
            .map_or_else(String::new, |p| p.display().to_string());
        self.users_from(&shown, text.as_deref())
    }

    /// The users of a file's `text` (`None`: no file), `shown` naming the
    /// file in errors.
    pub fn users_from(&self, shown: &str, text: Option<&str>) -> Result<Users> {
        let mut users = Users {
            closed: self.client_token.is_some() || text.is_some(),
            by_token: HashMap::new(),
            by_name: BTreeMap::new(),
            worker_token: self.worker_token.as_deref().map(token_sha256),
            visibility: self.visibility,
        };
        if users.closed && self.worker_token.is_none() {
            return Err(CoordinatorError::InvalidArgument(
                "a users file needs a worker token too (--worker-token-file or \
                 TALLY_WORKER_TOKEN): without one, anyone could act as a worker"
                    .into(),
            ));
        }
        // Where each name and token came from, for the errors.
        let mut name_lines: HashMap<String, String> = HashMap::new();
        let mut token_lines: HashMap<[u8; 32], String> = HashMap::new();
        if let Some(token) = &self.client_token {
            let admin = Arc::new(User::admin());
            users.by_token.insert(token_sha256(token), admin.clone());
            users.by_name.insert(ADMIN.into(), admin);
            name_lines.insert(ADMIN.into(), "the client token".into());
            token_lines.insert(token_sha256(token), "the client token's".into());
        }
        let Some(text) = text else {
            return Ok(users);
        };
        let forbidden: Vec<([u8; 32], &str)> = [
            (&self.worker_token, "the worker token"),
            (&self.scaler_token, "the scaler token"),
        ]
        .into_iter()
        .filter_map(|(token, what)| token.as_deref().map(|t| (token_sha256(t), what)))
        .collect();
        for (number, line) in text.lines().enumerate() {
            let number = number + 1;
            let at = |why: String| {
                CoordinatorError::InvalidArgument(format!(
                    "users file {shown}, line {number}: {why}"
                ))
            };
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (user, hash) = parse_line(line).map_err(at)?;
            if let Some(first) = name_lines.get(&user.name) {
                return Err(at(format!(
                    "the user {} is already named by {first}",
                    user.name
                )));
            }
            if let Some((_, what)) = forbidden.iter().find(|(h, _)| *h == hash) {
                return Err(at(format!(
                    "{}'s token is {what}: give each user a token of their own",
                    user.name
                )));
            }
            if let Some(first) = token_lines.get(&hash) {
                return Err(at(format!(
                    "{}'s token is also {first}: give each user a token of their own",
                    user.name
                )));
            }
            if users.by_name.len() >= MAX_USERS {
                return Err(at(format!("a users file holds at most {MAX_USERS} users")));
            }
            name_lines.insert(user.name.clone(), format!("line {number}"));
            token_lines.insert(hash, format!("{}'s (line {number})", user.name));
            let user = Arc::new(user);
            users.by_token.insert(hash, user.clone());
            users.by_name.insert(user.name.clone(), user);
        }
        Ok(users)
    }
}

fn read_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| {
        CoordinatorError::InvalidArgument(format!("users file {}: {e}", path.display()))
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(CoordinatorError::InvalidArgument(format!(
            "users file {}: larger than {MAX_FILE_BYTES} bytes",
            path.display()
        )));
    }
    Ok(text)
}

/// One user's line: `NAME ROLE sha256:HEX [weight=N] [slots=N] [queued=N]
/// [stage-bytes=SIZE]`.
fn parse_line(line: &str) -> std::result::Result<(User, [u8; 32]), String> {
    let mut fields = line.split_whitespace();
    let (Some(name), Some(role), Some(hash)) = (fields.next(), fields.next(), fields.next()) else {
        return Err(
            "expected NAME ROLE sha256:HEX [weight=N] [slots=N] [queued=N] [stage-bytes=SIZE]"
                .into(),
        );
    };
    check_name(name)?;
    let role = match role {
        "admin" => Role::Admin,
        "user" => Role::User,
        other => return Err(format!("the role {other:?} is neither admin nor user")),
    };
    let hash = parse_hash(hash)?;
    let mut user = User {
        name: name.into(),
        role,
        weight: 1,
        quotas: Quotas::default(),
    };
    let mut seen: Vec<&str> = Vec::new();
    for field in fields {
        let Some((key, value)) = field.split_once('=') else {
            return Err(format!("{field:?} is not KEY=VALUE"));
        };
        if seen.contains(&key) {
            return Err(format!("{key} is given twice"));
        }
        seen.push(key);
        let count = |least: u64, most: u64| -> std::result::Result<u64, String> {
            match value.parse::<u64>() {
                Ok(n) if (least..=most).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{key}={value}: expected a whole number from {least} to {most}"
                )),
            }
        };
        match key {
            "weight" => user.weight = count(1, u64::from(MAX_WEIGHT))? as u32,
            "slots" => user.quotas.slots = Some(count(1, u64::from(u32::MAX))? as u32),
            "queued" => user.quotas.queued_jobs = Some(count(1, u64::from(u32::MAX))? as u32),
            "stage-bytes" => {
                let size: bytesize::ByteSize = value
                    .parse()
                    .map_err(|e| format!("stage-bytes={value}: {e} (a size such as 50GiB)"))?;
                user.quotas.stage_bytes = Some(size.as_u64());
            }
            other => {
                return Err(format!(
                    "unknown setting {other:?} (weight, slots, queued or stage-bytes)"
                ));
            }
        }
    }
    Ok((user, hash))
}

fn check_name(name: &str) -> std::result::Result<(), String> {
    let fine = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    match fine {
        true => Ok(()),
        false => Err(format!(
            "the name {name:?} is not 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
        )),
    }
}

fn parse_hash(text: &str) -> std::result::Result<[u8; 32], String> {
    let wrong = || {
        format!(
            "{text:?} is not a token's hash: expected sha256: and 64 hex digits (`tally hash-token` prints it)"
        )
    };
    let hex = text.strip_prefix("sha256:").ok_or_else(wrong)?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(wrong());
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| wrong())?;
    }
    Ok(hash)
}

impl Users {
    /// A coordinator without tokens: every caller is the admin.
    pub fn open() -> Users {
        Users {
            closed: false,
            by_token: HashMap::new(),
            by_name: BTreeMap::new(),
            worker_token: None,
            visibility: Visibility::All,
        }
    }

    /// The user of a name, if the file (or the client token) names them.
    pub fn named(&self, name: &str) -> Option<&Arc<User>> {
        self.by_name.get(name)
    }

    /// The user a job owner stands for: the named user, or one of weight 1
    /// without quotas (a user no longer in the file).
    pub fn owner(&self, name: &str) -> Arc<User> {
        match self.by_name.get(name) {
            Some(user) => user.clone(),
            None if !self.closed && name == ADMIN => Arc::new(User::admin()),
            None => Arc::new(User::removed(name)),
        }
    }

    /// Every user the file and the client token name.
    pub fn all(&self) -> impl Iterator<Item = &Arc<User>> {
        self.by_name.values()
    }

    /// The user of a call's bearer token (`None`: no `authorization` header).
    fn caller(&self, presented: Option<&str>) -> std::result::Result<Arc<User>, Status> {
        if !self.closed {
            return Ok(Arc::new(User::admin()));
        }
        let Some(token) = presented else {
            return Err(Status::unauthenticated(
                "missing bearer token for the job API: set TALLY_TOKEN or --token-file",
            ));
        };
        let hash = token_sha256(token);
        match self.by_token.get(&hash) {
            Some(user) => Ok(user.clone()),
            None if self.worker_token == Some(hash) => Err(Status::permission_denied(
                "a worker token cannot call the job API: it needs a client token",
            )),
            None => Err(Status::unauthenticated(
                "invalid bearer token for the job API",
            )),
        }
    }
}

/// The users now, swapped whole on a reload.
#[derive(Debug)]
pub struct UserDirectory {
    source: UsersSource,
    current: RwLock<Arc<Users>>,
}

impl UserDirectory {
    /// Loads the users; a bad file is refused here, before anything serves.
    pub fn load(source: UsersSource) -> Result<UserDirectory> {
        let users = source.load()?;
        Ok(UserDirectory {
            source,
            current: RwLock::new(Arc::new(users)),
        })
    }

    /// Everyone is the admin: no tokens.
    pub fn open() -> UserDirectory {
        UserDirectory {
            source: UsersSource::default(),
            current: RwLock::new(Arc::new(Users::open())),
        }
    }

    pub fn current(&self) -> Arc<Users> {
        self.current.read().clone()
    }

    /// Reads the users file again; a file that does not check is refused and
    /// the users before it keep serving.
    pub fn reload(&self) -> Result<Arc<Users>> {
        let users = Arc::new(self.source.load()?);
        *self.current.write() = users.clone();
        Ok(users)
    }

    /// Whether there is a file to reload.
    pub fn has_file(&self) -> bool {
        self.source.file.is_some()
    }

    /// The interceptor of the job API.
    pub fn gate(self: &Arc<Self>) -> UsersGate {
        UsersGate {
            directory: self.clone(),
        }
    }
}

/// The job API's check: a call's bearer token must be a user's; the user
/// rides in the request's extensions (see [`caller_of`]).
#[derive(Clone, Debug)]
pub struct UsersGate {
    directory: Arc<UserDirectory>,
}

impl Interceptor for UsersGate {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let user = self.directory.current().caller(presented)?;
        request.extensions_mut().insert(Caller(user));
        Ok(request)
    }
}

/// The user a job API call was made by.
#[derive(Clone, Debug)]
pub struct Caller(pub Arc<User>);

/// The user of a call that passed the [`UsersGate`].
pub fn caller_of<T>(request: &Request<T>) -> Result<Arc<User>> {
    request
        .extensions()
        .get::<Caller>()
        .map(|c| c.0.clone())
        .ok_or_else(|| CoordinatorError::Internal("a job API call without its user".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(file: bool) -> UsersSource {
        UsersSource {
            client_token: Some("client-secret".into()),
            worker_token: Some("worker-secret".into()),
            scaler_token: Some("scaler-secret".into()),
            file: file.then(|| PathBuf::from("users")),
            visibility: Visibility::All,
        }
    }

    fn line(name: &str, role: &str, token: &str, rest: &str) -> String {
        format!("{name} {role} {} {rest}\n", token_hash_text(token))
    }

    fn refused(text: &str) -> String {
        source(true)
            .users_from("users", Some(text))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_file_gives_each_token_its_user_and_settings() {
        let text = format!(
            "# the team\n\n{}{}",
            line("alice", "admin", "a-token", "weight=3 slots=4"),
            line(
                "bob",
                "user",
                "b-token",
                "queued=10 stage-bytes=1GiB # a comment"
            ),
        );
        let users = source(true).users_from("users", Some(&text)).unwrap();
        let alice = users.caller(Some("a-token")).unwrap();
        assert_eq!(
            (alice.name.as_str(), alice.role, alice.weight),
            ("alice", Role::Admin, 3)
        );
        assert_eq!(alice.quotas.slots, Some(4));
        let bob = users.caller(Some("b-token")).unwrap();
        assert_eq!(bob.role, Role::User);
        assert_eq!(bob.quotas.queued_jobs, Some(10));
        assert_eq!(bob.quotas.stage_bytes, Some(1 << 30));
        assert_eq!(users.caller(Some("client-secret")).unwrap().name, ADMIN);
        let code = |r: std::result::Result<Arc<User>, Status>| r.unwrap_err().code();
        assert_eq!(
            code(users.caller(Some("guess"))),
            tonic::Code::Unauthenticated
        );
        assert_eq!(code(users.caller(None)), tonic::Code::Unauthenticated);
        assert_eq!(
            code(users.caller(Some("worker-secret"))),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            users.owner("carol").weight,
            1,
            "a removed user has weight 1"
        );
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line() {
        let alice = line("alice", "user", "a-token", "");
        for (text, says) in [
            (
                format!("{alice}{}", line("alice", "user", "other", "")),
                "line 2: the user alice is already named by line 1",
            ),
            (
                format!("{alice}{}", line("bob", "user", "a-token", "")),
                "line 2: bob's token is also alice's (line 1)",
            ),
            (
                line("bob", "user", "worker-secret", ""),
                "line 1: bob's token is the worker token",
            ),
            (
                line("bob", "user", "scaler-secret", ""),
                "line 1: bob's token is the scaler token",
            ),
            (
                line("bob", "user", "client-secret", ""),
                "line 1: bob's token is also the client token's",
            ),
            (
                line("admin", "user", "x", ""),
                "line 1: the user admin is already named by the client token",
            ),
            (
                format!("\n{}", line("bob", "boss", "x", "")),
                "line 2: the role \"boss\"",
            ),
            (line("Bob", "user", "x", ""), "line 1: the name \"Bob\""),
            (
                line("bob", "user", "x", "weight=0"),
                "line 1: weight=0: expected a whole number from 1 to 10000",
            ),
            (
                line("bob", "user", "x", "slots=2 slots=3"),
                "line 1: slots is given twice",
            ),
            (
                line("bob", "user", "x", "colour=red"),
                "line 1: unknown setting \"colour\"",
            ),
            (
                line("bob", "user", "x", "stage-bytes=lots"),
                "line 1: stage-bytes=lots",
            ),
            (
                "bob user sha256:abc\n".into(),
                "line 1: \"sha256:abc\" is not a token's hash",
            ),
            ("bob user\n".into(), "line 1: expected NAME ROLE"),
        ] {
            let error = refused(&text);
            assert!(error.contains(says), "{error:?} should say {says:?}");
            assert!(error.starts_with("users file users, "), "{error}");
        }
    }

    #[test]
    fn without_tokens_everyone_is_the_admin_and_a_file_needs_a_worker_token() {
        let open = UsersSource::default().load().unwrap();
        assert!(open.caller(None).unwrap().is_admin());
        let no_worker = UsersSource {
            worker_token: None,
            ..source(false)
        };
        let error = no_worker.load().unwrap_err().to_string();
        assert!(error.contains("needs a worker token"), "{error}");
    }

    #[test]
    fn a_reload_that_fails_keeps_the_users_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        std::fs::write(&path, line("alice", "user", "a-token", "")).unwrap();
        let directory = UserDirectory::load(UsersSource {
            file: Some(path.clone()),
            ..source(true)
        })
        .unwrap();
        std::fs::write(&path, line("alice", "user", "worker-secret", "")).unwrap();
        assert!(directory.reload().is_err());
        assert_eq!(
            directory.current().caller(Some("a-token")).unwrap().name,
            "alice"
        );
        std::fs::write(&path, line("bob", "user", "b-token", "")).unwrap();
        directory.reload().unwrap();
        assert!(directory.current().caller(Some("a-token")).is_err());
        assert_eq!(
            directory.current().caller(Some("b-token")).unwrap().name,
            "bob"
        );
    }
}
