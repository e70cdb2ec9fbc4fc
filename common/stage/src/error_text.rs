//! `object_store` errors read as one line: the text of the error and its
//! causes, an S3 error response cut to its code and message (its body may
//! name the access key id), bounded in length. Shared by the store and the
//! S3 configuration.

/// An `object_store` error read: one line, and the HTTP status if a
/// response came.
pub(crate) struct ErrorReading {
    pub(crate) line: String,
    pub(crate) status: Option<u16>,
}

/// The longest line kept of an `object_store` error.
const MAX_ERROR_LINE: usize = 400;

/// Where an HTTP error response's body starts in `object_store`'s text: it
/// runs from there to the end of that error's text.
const BODY_AFTER_STATUS: &str = "Server returned non-2xx status code: ";
const BODY_ALONE: &str = "Server returned error response: ";

/// One line of `error`: its text and those of its causes not already in it,
/// each with the body of an HTTP error response cut to the S3 error code and
/// message, on one line, at most [`MAX_ERROR_LINE`] bytes.
pub(crate) fn one_line(error: &object_store::Error) -> String {
    read_error(error).line
}

pub(crate) fn read_error(error: &object_store::Error) -> ErrorReading {
    let text = error.to_string();
    let mut status = None;
    let mut parts = vec![cut_body(&text, &mut status)];
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            parts.push(cut_body(&said, &mut status));
        }
        cause = c.source();
    }
    let line = parts
        .join(": ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    ErrorReading {
        line: bounded(line, MAX_ERROR_LINE),
        status,
    }
}

/// `text` with an HTTP error response's body replaced by its S3 code and
/// message (nothing else of it), noting the status.
fn cut_body(text: &str, status: &mut Option<u16>) -> String {
    if let Some(at) = text.find(BODY_AFTER_STATUS) {
        let rest = &text[at + BODY_AFTER_STATUS.len()..];
        let (code, body) = rest.split_once(": ").unwrap_or((rest, ""));
        *status = status.or_else(|| code.get(..3).and_then(|c| c.parse().ok()));
        return format!("{}HTTP {code}{}", &text[..at], s3_error(body));
    }
    if let Some(at) = text.find(BODY_ALONE) {
        let body = &text[at + BODY_ALONE.len()..];
        return format!("{}error response{}", &text[..at], s3_error(body));
    }
    text.to_string()
}

/// `: Code: Message` of an S3 error body, or nothing.
fn s3_error(body: &str) -> String {
    let element = |name: &str| {
        let open = format!("<{name}>");
        let from = body.find(&open)? + open.len();
        let to = from + body[from..].find(&format!("</{name}>"))?;
        Some(unescape_xml(&body[from..to]))
    };
    match (element("Code"), element("Message")) {
        (Some(code), Some(message)) => format!(": {code}: {message}"),
        (Some(code), None) => format!(": {code}"),
        _ => String::new(),
    }
}

fn unescape_xml(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// `line` cut to at most `max` bytes at a character boundary.
fn bounded(mut line: String, max: usize) -> String {
    if line.len() > max {
        let mut end = max - 3;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}
