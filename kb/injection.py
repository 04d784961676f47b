"""Ingest-time detector of text aimed at the model rather than the reader (indirect prompt injection).

Company documents are written for people. An instruction that addresses an AI, tells "you" how to
shape "your response", opens a fake chat turn, or asks for a task unrelated to the document is a
sign that someone planted it for the agent to obey. Heuristics only: regexes over general phrasings
(never over known payload strings), cheap enough to run on every chunk at ingest.

A flag is evidence for review and for fencing the chunk in prompts, not proof, and not a reason to
drop the chunk: the agent must treat every retrieved chunk as data regardless. `TASK_REQUEST` is the
weak reason: FAQ-style documents ("How do I submit an expense report?") trigger it legitimately;
every other reason is in `STRONG_REASONS`.
"""

from __future__ import annotations

import re
import unicodedata

OVERRIDE = "override_instructions"  # ignore/disregard earlier instructions
ROLE_MARKERS = "role_markers"  # fake chat turns, special tokens, end-of-session fences
JAILBREAK = "jailbreak_roleplay"  # "you are now", DAN, developer mode, system prompt talk
ADDRESSES_MODEL = "instructions_to_model"  # an imperative aimed at an AI / assistant / language model
OUTPUT_MANIPULATION = "output_manipulation"  # dictates the wording, format or content of "your response"
EXFILTRATION = "exfiltration"  # send conversation, secrets or data somewhere; reveal the prompt
TOOL_ABUSE = "tool_abuse"  # call tools, reach other tenants, bypass filters
SECRECY = "secrecy"  # hide the action from the user
TASK_REQUEST = "task_request"  # a stand-alone request written for an assistant, not for a reader

_ORDER = (OVERRIDE, ROLE_MARKERS, JAILBREAK, ADDRESSES_MODEL, OUTPUT_MANIPULATION, EXFILTRATION, TOOL_ABUSE, SECRECY, TASK_REQUEST)
STRONG_REASONS = frozenset({OVERRIDE, ROLE_MARKERS, JAILBREAK, ADDRESSES_MODEL, OUTPUT_MANIPULATION, EXFILTRATION, TOOL_ABUSE, SECRECY})


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


def _compile(*alternatives: str) -> re.Pattern[str]:
    return re.compile(_any(*alternatives), re.IGNORECASE | re.MULTILINE)


_NOT_END = r"[^.!?\n]"  # stay inside one sentence
_INSTRUCTIONS = _any(
    r"instructions?", r"directions?", r"directives?", "rules", "guidelines", r"prompts?", r"commands?", "guidance", "context"
)
_MODEL = _any(
    "AI",
    r"A\.I\.",
    "artificial intelligence",
    "assistant",
    r"chat ?bot",
    "language model",
    "LLM",
    "model",
    "agent",
    "GPT",
    "ChatGPT",
    "Gemini",
    "Claude",
    "copilot",
)
_OUTPUT = _any("response", "reply", "answer", "message", "output", "summary", "translation", "completion") + "s?"
_PEOPLE = _any("user", "reader", "human", "customer", "operator") + "s?"
_LANGUAGES = _any(
    "english",
    "french",
    "spanish",
    "german",
    "italian",
    "portuguese",
    "russian",
    "chinese",
    "japanese",
    "korean",
    "arabic",
    "hindi",
    "dutch",
    "latin",
)

_OVERRIDE = _compile(
    rf"\b(?:ignore|disregard|forget|override|bypass|skip|abandon)\b{_NOT_END}{{0,40}}?"
    rf"\b(?:{_INSTRUCTIONS}|(?:the )?(?:above|previous|prior|preceding|earlier)\b"
    r"|the rest of (?:this|the)\b|everything (?:above|before|else))",
    r"\b(?:new|updated|real|actual|revised) (?:instructions|directives|directions|orders|task)\s*:",
    r"\b(?:disregard|ignore) (?:all|any) (?:info(?:rmation)?|data|text|content)\b",
)
_ROLE_MARKERS = _compile(
    r"^\s*(?:system|assistant|user|human|ai|model)\s*:",
    r"<\|?\s*(?:end[ _-]of[ _-](?:session|conversation|text|turn)|im_start|im_end|endoftext|system|eot_id)\s*\|?>",
    r"\[/?INST\]",
    r"<<\s*/?SYS\s*>>",
    r"^\s*#{2,}\s*(?:instruction|system|response)\b",
    r"<\s*/?\s*(?:system|instructions?)\s*>",
)
_JAILBREAK = _compile(
    r"\byou are now (?:a|an|in|my|the|free|unrestricted|unfiltered|called|named|known as|DAN)\b",
    rf"\byou are no longer (?:bound|restricted|limited|an? {_MODEL})\b",
    r"\bfrom now on,? you\b",
    r"\b(?:pretend|imagine) (?:that )?you(?:'re| are)\b",
    r"\b(?:act|behave|respond) as (?:if you were |though you were )?(?:an? )?(?:unrestricted|unfiltered|jailbroken|evil|different|new)\b",
    r"\bdo anything now\b|\bDAN mode\b|\bdeveloper mode\b|\bjailbr(?:eak|oken) mode\b",
    r"\bwithout (?:any )?(?:restrictions|filters|guardrails)\b",
    r"\b(?:system|hidden|initial|original|secret) prompt\b",
)
_ADDRESSES_MODEL = _compile(
    rf"\b(?:if|when) you are an? {_MODEL}\b",
    rf"\bnote to (?:the |any )?{_MODEL}s?\b",
    rf"\b(?:dear|attention|hey|hello|hi),? {_MODEL}s?\b",
    rf"\b{_MODEL}s? (?:reading|processing|summari[sz]ing|parsing) this\b",
    rf"\b{_MODEL}s?,? (?:you )?(?:must|should|shall|will|need to|are (?:required|instructed) to) (?:now |always |instead )?"
    r"(?:ignore|reply|respond|answer|say|output|print|reveal|include|tell|write|follow|comply|obey|refuse)\b",
)
_SHAPE_VERBS = _any(
    "add",
    "include",
    "integrate",
    "insert",
    "append",
    "prepend",
    "embed",
    "mention",
    "modify",
    "rewrite",
    "render",
    "encode",
    "encrypt",
    "convert",
    "translate",
    "replace",
    "substitute",
    "express",
    "format",
    "write",
    "provide",
    "present",
    "use",
    "apply",
    "reverse",
    "invert",
    "scramble",
    "jumble",
    "shift",
    "enhance",
    "augment",
    "end",
    "begin",
    "start",
    "finish",
    "conclude",
    "sign",
    "respond",
    "reply",
    "answer",
    "introduce",
    "misspell",
    "rearrange",
    "remove",
    "combine",
    "group",
    "give",
    "spread",
    "suggest",
    "tease",
    "hint",
    "promote",
    "highlight",
    "stress",
    r"emphasi[sz]e",
    "say",
    "state",
    "tell",
    "display",
    "put",
    "make",
    "keep",
    "place",
)
_YOUR_OUTPUT = re.compile(rf"\byour {_OUTPUT}\b", re.IGNORECASE)
_SHAPES_OUTPUT = _compile(  # checked only in the sentence before a "your response" (see _dictates_output)
    r"\b(?:in|to|into|within|throughout|at the (?:start|end|beginning) of|for|of) $",
    rf"\b{_SHAPE_VERBS}\b",
)
_OUTPUT_MANIPULATION = _compile(
    rf"\byour {_OUTPUT}(?:'s)?\b{_NOT_END}{{0,40}}\b(?:must|should|shall|needs to) (?:be|include|contain|start|end|say)\b",
    rf"\b(?:reply|respond|answer)(?: only)? (?:in|with|using) (?:[a-z]+ )?"
    rf"(?:base ?\d+|emojis?|{_LANGUAGES}|reverse|code|cipher|the following)\b",
    r"\b(?:reply|respond|answer) with (?:only|just|exactly) (?:the following|this)\b",
    r"\b(?:print|repeat|output|say|return) (?:only |just |exactly |verbatim )*(?:the following|this (?:text|sentence|phrase|string)|\{)",
)
_DATA = _any(
    "conversation",
    r"chat (?:history|log)",
    "history",
    "system prompt",
    "instructions",
    r"api[ _-]?keys?",
    r"passwords?",
    "credentials",
    r"secrets?",
    r"tokens?",
    r"personal (?:data|information|details)",
    r"user(?:'s)? (?:data|information|details|messages)",
    "bank details",
    r"card (?:number|details)",
    r"documents?",
    "files",
    r"emails?",
    "contacts",
    r"the (?:above|previous) (?:text|messages?|content)",
)
_DESTINATION = _any(
    r"https?://", r"www\.", r"[\w.-]+@[\w-]+\.", r"[\w-]+\.(?:com|net|org|io|xyz|ru)\b", r"this (?:url|address|link|endpoint)"
)
_EXFILTRATION = _compile(
    rf"\b(?:send|post|e-?mail|forward|upload|transmit|leak|exfiltrate|share|submit|copy)\b{_NOT_END}{{0,60}}\b{_DATA}\b"
    rf"{_NOT_END}{{0,60}}\b(?:to|at|via|into)\s+{_DESTINATION}",
    rf"\b(?:reveal|disclose|print|output|show|repeat|dump)\b{_NOT_END}{{0,30}}\b(?:your|the) "
    r"(?:system prompt|instructions|api[ _-]?keys?|credentials|secrets?|hidden (?:text|prompt))\b",
    r"!\[[^\]]*\]\(\s*https?://[^)\s]*[?&][\w-]+=",  # a markdown image whose URL carries data out when rendered
    r"\bhttps?://[^\s)]*[?&](?:q|data|d|p|payload|secret|token|chat|conv)=\{",
)
_TENANTS = _any(
    r"tenants?", r"companies'?", r"customers'?", r"organi[sz]ations'?", "corpora", r"knowledge ?bases", "workspaces", "accounts"
)
_TOOL_ABUSE = _compile(
    rf"\b(?:call|invoke|execute|trigger)\b{_NOT_END}{{0,30}}\b(?:tools?|function calls?|plugins?)\b",
    r"\buse (?:the |your )?(?:search|retrieval|lookup|fetch|browse|browser|email|http|web|sql|shell|code)[ _-]?(?:tool|plugin)s? to\b",
    rf"\b(?:search|query|retrieve|fetch|access|read|list|open)\b{_NOT_END}{{0,30}}\b(?:all|every|another|other|different|foreign)\b"
    rf"{_NOT_END}{{0,15}}\b{_TENANTS}\b{_NOT_END}{{0,20}}\b(?:data|documents?|files|records|corpus|corpora|knowledge ?bases?)\b",
    r"\btenant_id\b|\bcross[- ]tenant\b",
    rf"\b(?:bypass|disable|turn off|circumvent|evade)\b{_NOT_END}{{0,20}}\b(?:the )?"
    r"(?:filters?|safety|guardrails?|restrictions|access control|permissions|security checks?|content policy|moderation)\b",
)
_SECRECY = _compile(
    rf"\b(?:do not|don't|never)\s+(?:tell|inform|alert|mention (?:this|it) to|let|notify|warn)\s+(?:the )?{_PEOPLE}\b",
    rf"\bwithout (?:telling|informing|alerting|notifying) (?:the )?{_PEOPLE}\b",
    rf"\b(?:keep|hide) (?:this|it) (?:secret|hidden) from (?:the )?{_PEOPLE}\b",
)
_REQUEST_VERBS = _any(
    "write",
    "provide",
    "explain",
    "describe",
    r"summari[sz]e",
    "translate",
    "recommend",
    "suggest",
    r"analy[sz]e",
    "determine",
    "compose",
    "draft",
    "develop",
    "generate",
    "classify",
    "outline",
    "break down",
    "list",
    "give me",
    "tell me",
    "show me",
    "help me",
    "teach me",
    "find me",
    "create",
    "compile",
    "calculate",
    "solve",
)
_REQUEST_OBJECTS = _any(
    "a",
    "an",
    "the",
    "me",
    "us",
    "my",
    "some",
    "this",
    "these",
    "those",
    "how",
    "what",
    "why",
    "which",
    r"insights?",
    r"examples?",
    "ideas",
    "tips",
    "steps",
    "advice",
    "information",
    "details",
    r"[a-z]+ (?:of|for|about|on|into|to|that)",
)
_TASK_REQUEST = _compile(  # matched against one sentence at a time
    rf"^{_REQUEST_VERBS}\s+{_REQUEST_OBJECTS}\b",
    rf"^(?:can|could|would|will) you (?:please )?(?:{_REQUEST_VERBS}|reply|respond|answer|use|classify|help)\b",
    r"^how (?:do|can|should|would|could) (?:i|you say)\b",
    r"^help me (?:with|to|find|understand|plan|choose|pick)\b",
    r"^(?:suggest|recommend|summari[sz]e|explain|translate|paraphrase|proofread)\s+\w+[^.!?]{0,120}[.!?]?$",
    rf"^what(?:'s| is| are| does)\b[^.!?]{{0,60}}\bin {_LANGUAGES}\?",
    r"^(?:is|are) (?:this|these|the following) [^.!?]{0,40}\b(?:positive|negative|neutral|true|false|correct)\b.*\?",
    r"^(?:replace|substitute|swap|convert|encode|encrypt|reverse|scramble|shuffle|jumble|misspell|capitali[sz]e)\b[^.!?]{0,60}"
    r"\b(?:letters?|vowels?|consonants?|characters?|words?|symbols?|emojis?)\b",
)
_WHOLE_TEXT = (
    (OVERRIDE, _OVERRIDE),
    (ROLE_MARKERS, _ROLE_MARKERS),
    (JAILBREAK, _JAILBREAK),
    (ADDRESSES_MODEL, _ADDRESSES_MODEL),
    (OUTPUT_MANIPULATION, _OUTPUT_MANIPULATION),
    (EXFILTRATION, _EXFILTRATION),
    (TOOL_ABUSE, _TOOL_ABUSE),
    (SECRECY, _SECRECY),
)
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)", re.MULTILINE)
_OPENING_QUOTE = re.compile(r"^[\"'\u201c\u00ab]")


def detect_injection(text: str) -> list[str]:
    """Reasons the text looks aimed at a model (the module's reason constants, in a fixed order); []
    when it looks clean."""
    normal = _normalise(text)
    found = {reason for reason, pattern in _WHOLE_TEXT if pattern.search(normal)}
    if OUTPUT_MANIPULATION not in found and _dictates_output(normal):
        found.add(OUTPUT_MANIPULATION)
    if _has_task_request(normal):
        found.add(TASK_REQUEST)
    return [reason for reason in _ORDER if reason in found]


_TAG_CHARS = re.compile("[\U000e0020-\U000e007e]+")
_FORMAT_CHARS = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]")


def _normalise(text: str) -> str:
    """Undo the usual hiding tricks before matching: Unicode tag characters (invisible "ASCII
    smuggling") are read as the ASCII they encode, zero-width and bidi controls are dropped, and
    NFKC folds full-width and styled letters, so "i\u200bgnore" or "\uff49\uff47\uff4e\uff4f\uff52\uff45" still match."""
    text = _TAG_CHARS.sub(lambda m: " " + "".join(chr(ord(ch) - 0xE0000) for ch in m.group()) + " ", text)
    text = unicodedata.normalize("NFKC", _FORMAT_CHARS.sub("", text))
    return text.replace("\u2019", "'").replace("\u2018", "'")


def _dictates_output(text: str) -> bool:
    """ "Add X to your reply", "encode your answer": a shaping verb earlier in the same sentence as
    "your response". Anchored on the rare phrase, then looking back, because a regex that tries
    every verb at every position is ten times slower."""
    for m in _YOUR_OUTPUT.finditer(text):
        window = text[max(0, m.start() - 100) : m.start()]
        window = re.split(r"[.!?\n]", window)[-1]
        if _SHAPES_OUTPUT.search(window):
            return True
    return False


def _has_task_request(text: str) -> bool:
    """A stand-alone sentence asking for a task, as typed to an assistant. Sentences opening with a
    quote are skipped: reporters quote questions; documents rarely make requests in their own voice."""
    for m in _SENTENCE.finditer(text):
        sentence = m.group().strip()
        if sentence and len(sentence) <= 300 and not _OPENING_QUOTE.match(sentence) and _TASK_REQUEST.search(sentence):
            return True
    return False
