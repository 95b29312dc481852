//! How a tool's answer becomes an MCP result: every result is a JSON object
//! (as text and as structured content), shaped by [`present::Reply`]; a
//! refusal is `isError: true` with `{"error": {"code", "message"}}`. Tools
//! return `Result<Reply, Error>` and rmcp renders it through these impls.

use rmcp::ErrorData;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};

use crate::error::Error;
use crate::present::Reply;

impl IntoCallToolResult for Reply {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        // What `CallToolResult::structured` makes, with the text written
        // by `serde_json::to_string` rather than through `Display`, which
        // takes a slower path (measurable on answers of many messages).
        let value = self.into_value();
        let text = serde_json::to_string(&value).unwrap_or_else(|_| value.to_string());
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(value);
        Ok(result.into())
    }
}

/// A reply whose text for the model is a short summary, while the whole
/// answer travels as structured content (`show_board`: the app renders
/// the board, the model reads a few lines).
pub struct Summarized {
    pub reply: Reply,
    pub text: String,
}

impl IntoCallToolResult for Summarized {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let mut result = CallToolResult::success(vec![ContentBlock::text(self.text)]);
        result.structured_content = Some(self.reply.into_value());
        Ok(result.into())
    }
}

impl IntoCallToolResult for Error {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        Ok(error(&self).into())
    }
}

/// A refused call: `isError: true`, text `{"error": {"code", "message"}}`.
pub fn error(e: &Error) -> CallToolResult {
    e.log_if_internal();
    CallToolResult::structured_error(e.body())
}

/// The error code of a refused result, for the audit row.
pub fn error_code(result: &CallToolResult) -> String {
    result
        .structured_content
        .as_ref()
        .and_then(|v| v["error"]["code"].as_str())
        .unwrap_or("error")
        .to_owned()
}
