//! The `/v1` clients for tests: REST over plain HTTP, and the SSE stream
//! read the way the dashboard and `chatroom watch` read it.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::TestServer;

/// A REST client for `agent` in room `lobby` (created if it is missing).
pub async fn rest(s: &TestServer, agent: &str) -> Rest {
    if s.store.get_room("lobby").await.unwrap().is_none() {
        s.room("lobby").await;
    }
    Rest::new(&s.url, &s.token(agent, "lobby").await)
}

/// A `/v1` client with one token.
#[derive(Clone)]
pub struct Rest {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

/// An answer: status, headers, and the body as JSON (or a JSON string
/// holding the raw text when it is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub bytes: Vec<u8>,
    pub json: Value,
}

impl Answer {
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Rest {
    pub fn new(base: &str, token: &str) -> Rest {
        Rest {
            http: reqwest::Client::new(),
            base: base.to_owned(),
            token: token.to_owned(),
        }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap_or_default().to_vec();
        let json = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer {
            status,
            headers,
            bytes,
            json,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(self.url(path)).bearer_auth(&self.token))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(
            self.http
                .post(self.url(path))
                .bearer_auth(&self.token)
                .json(&body),
        )
        .await
    }

    pub async fn post_bytes(&self, path: &str, body: Vec<u8>) -> Answer {
        self.send(
            self.http
                .post(self.url(path))
                .bearer_auth(&self.token)
                .body(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(self.http.delete(self.url(path)).bearer_auth(&self.token))
            .await
    }

    /// Opens `/v1/stream?QUERY`; panics unless it answers 200.
    pub async fn stream(&self, query: &str) -> Stream {
        let resp = self
            .http
            .get(self.url(&format!("/v1/stream?{query}")))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("stream request");
        assert_eq!(resp.status(), 200, "stream: HTTP {}", resp.status());
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Stream {
            body: Box::pin(resp.bytes_stream().map(|r| r.map(|b| b.to_vec()))),
            buf: Vec::new(),
            pending: std::collections::VecDeque::new(),
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct Sse {
    pub name: String,
    pub id: Option<String>,
    pub data: Value,
}

type Body = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// An open `/v1/stream`.
pub struct Stream {
    body: Body,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<Sse>,
}

impl Stream {
    /// The next event, or `None` when the stream ended; panics after `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Option<Sse> {
        tokio::time::timeout(limit, self.next())
            .await
            .expect("no event in time")
    }

    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            match self.body.next().await {
                None | Some(Err(_)) => return None,
                Some(Ok(chunk)) => {
                    self.buf.extend_from_slice(&chunk);
                    while let Some(i) = self.buf.windows(2).position(|w| w == b"\n\n") {
                        let block: Vec<u8> = self.buf.drain(..i + 2).collect();
                        let text = String::from_utf8_lossy(&block[..i]).into_owned();
                        let mut name = "message".to_owned();
                        let mut id = None;
                        let mut data = Vec::new();
                        for line in text.lines() {
                            if line.starts_with(':') {
                                continue;
                            }
                            let (f, v) = line.split_once(':').unwrap_or((line, ""));
                            let v = v.strip_prefix(' ').unwrap_or(v);
                            match f {
                                "event" => name = v.to_owned(),
                                "id" => id = Some(v.to_owned()),
                                "data" => data.push(v.to_owned()),
                                _ => {}
                            }
                        }
                        if !data.is_empty() {
                            let data =
                                serde_json::from_str(&data.join("\n")).expect("SSE data is JSON");
                            self.pending.push_back(Sse { name, id, data });
                        }
                    }
                }
            }
        }
    }

    /// The next event named `name`, skipping others; panics after `limit`.
    pub async fn expect(&mut self, name: &str, limit: Duration) -> Sse {
        tokio::time::timeout(limit, async {
            loop {
                match self.next().await {
                    Some(e) if e.name == name => return e,
                    Some(_) => {}
                    None => panic!("the stream ended before a {name:?} event"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {name:?} event within {limit:?}"))
    }

    /// Every event up to and including the `files` snapshot that closes the
    /// replay, in order.
    pub async fn until_snapshot(&mut self, limit: Duration) -> Vec<Sse> {
        let mut seen = Vec::new();
        tokio::time::timeout(limit, async {
            loop {
                match self.next().await {
                    Some(e) => {
                        let done = e.name == "files";
                        seen.push(e);
                        if done {
                            return;
                        }
                    }
                    None => panic!("the stream ended during the replay: {seen:?}"),
                }
            }
        })
        .await
        .expect("replay in time");
        seen
    }
}
