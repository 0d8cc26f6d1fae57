"""A mock OpenAI- and Anthropic-compatible upstream, for tests, demos and benchmarks.

It answers like a provider does, over real HTTP when served by uvicorn: chat completions
(whole and as SSE, with content and tool-call deltas, usage, the provider's headers),
the Responses API (`/v1/responses`, whole and as its event stream, and its token count
`/v1/responses/input_tokens`; see responses.py), Anthropic's Messages API (`/v1/messages` and
its `count_tokens`, whole and as its event stream; see messages.py), scripted errors,
`/v1/models`, `HEAD /` (Claude Code's probe), and an echo of any other `/v1/*` request. Every
request it receives is recorded, so a test can check what the proxy actually forwarded.

Replies are scripted with `MockUpstream.queue(Reply(...))`. With nothing queued, the answer
is, in order: `MockUpstream.default` when one was given; the summarizer's summary for a
request carrying the proxy's summary prompt; the agent's next move when an `AgentScript` was
given; else `Reply()`.

Options make it a strict, realistic provider; all are off by default:

- `window`, `token_factor`: a context window, counted by a tokenizer that disagrees with the
  proxy's; an overflow gets OpenAI's `context_length_exceeded` 400 (Anthropic's "prompt is
  too long" on `/v1/messages`; streams too, before any event), and `usage` reports the
  provider's count;
- `strict`, `roles_alternate`: OpenAI's tool-pairing 400s, and a strict template's
  alternation 400; on `/v1/messages`, Anthropic's: tool_use/tool_result pairing, the first
  role, four cache breakpoints, thinking signatures, headers;
- `agent`: tool calls for a few rounds per user turn, then an answer;
- `summary_quality`: a summarizer that keeps the facts, or one that loses them;
- prompt-cache accounting in `usage.prompt_tokens_details.cached_tokens`, after OpenAI's rule
  (on `/v1/messages`, Anthropic's breakpoints, reads and writes);
- `native_compaction`: OpenAI's own compaction (`/v1/responses/compact`, `compaction_trigger`);
  off, both are refused as a provider without it refuses them.

Modules: `app` (the server and its state), `script` (what tests queue and read back),
`completions` (a reply as JSON or SSE chunks), `errors` (the providers' wording),
`strictness`, `meter` (token counts), `cache`, `agent`, `summarizer`; and for the Responses
API `responses` (the endpoint), `responses_items`, `responses_meter`, `responses_strictness`,
`responses_output`, `responses_stream`, `responses_compaction`; and for the Messages API
`messages` (the endpoints), `messages_request`, `messages_errors`, `messages_strictness`,
`messages_thinking`, `messages_meter`, `messages_cache`, `messages_view`, `messages_output`,
`messages_stream`.
"""

from proxy.mock_upstream.agent import AgentScript
from proxy.mock_upstream.app import MockUpstream
from proxy.mock_upstream.messages_meter import messages_prompt_tokens
from proxy.mock_upstream.responses_meter import responses_prompt_tokens
from proxy.mock_upstream.script import Recorded, Reply, ToolCall
from proxy.mock_upstream.summarizer import SummaryQuality

__all__ = [
    "AgentScript",
    "MockUpstream",
    "Recorded",
    "Reply",
    "SummaryQuality",
    "ToolCall",
    "messages_prompt_tokens",
    "responses_prompt_tokens",
]
