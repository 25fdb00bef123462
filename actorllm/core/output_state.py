"""The output state of one engine request (one sample of a user request).

Theory of operation: :meth:`RequestState.update` folds one ``EngineCoreOutput`` into the
state (token ids, text, logprobs, timestamps) and applies stop strings;
:meth:`RequestState.completion` renders a ``CompletionOutput`` for the request's output kind
and, for DELTA, advances the offsets of what was already handed out. The parent request
(``core/output_parent.py``) decides *when* to render.

Text rules (vLLM's):

* Token ids are never truncated: every id the scheduler produced is reported, also ids that
  came after a stop string in the same step. Only the text is cut at the stop string.
* A stop *token* (EOS or one of ``stop_token_ids``; the scheduler finished the request with
  ``FinishReason.STOP``) is kept in ``token_ids`` but not detokenized, unless
  ``include_stop_str_in_output``.
* Stop strings are not searched in the text the first ``min_tokens`` tokens completed (as
  vLLM: a token that ends inside a character adds its text with the token that completes
  the character, so that text is searched once it is whole).
* Without a tokenizer or with ``detokenize=False`` the text is ``""`` and stop strings are
  not applied.
* A FINAL_ONLY request without stop strings is detokenized once, when it ends
  (``IncrementalDetokenizer(deferred=True)``): the same text, one tokenizer call instead of
  one per token.
"""

from __future__ import annotations

from typing import final

from tokenizers import Tokenizer

from actorllm.core.detokenizer import IncrementalDetokenizer
from actorllm.core.engine_core_output import EngineCoreOutput, FinishReason
from actorllm.core.logprobs import DecodeFn, SampleLogprobsState
from actorllm.core.outputs import CompletionOutput, SamplingMask, WeightVersionSpan
from actorllm.core.pooling_params import PooledData
from actorllm.core.routed_experts import RoutedExperts
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.core.stop_checker import StopChecker

# A request's text pieces are joined once this many accumulated (RequestState.text).
PIECES_PER_JOIN = 256


@final
class RequestState:
    """Everything the output processor knows about one engine request."""

    def __init__(
        self,
        req_id: str,
        index: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
        tokenizer: Tokenizer | None,
        decode_token: DecodeFn | None,
    ) -> None:
        self.req_id = req_id
        self.index = index  # which of the parent's n samples
        self.params = params
        detokenize = tokenizer is not None and params.detokenize
        self._detok: IncrementalDetokenizer | None = None
        if tokenizer is not None and detokenize:
            self._detok = IncrementalDetokenizer(
                tokenizer,
                prompt_token_ids,
                skip_special_tokens=params.skip_special_tokens,
                spaces_between_special_tokens=params.spaces_between_special_tokens,
                # Nobody reads a FINAL_ONLY request's text before it ends, unless stop
                # strings search it: decode it once, at the end, not one token a step.
                deferred=params.output_kind == RequestOutputKind.FINAL_ONLY
                and not params.stop_strings,
            )
        stops = params.stop_strings if detokenize else []
        self._stops = StopChecker(stops, include_in_output=params.include_stop_str_in_output)
        self.token_ids: list[int] = []
        # The text: _joined, then the pieces not joined yet (``text`` joins them; the
        # per-step readers take only a tail, ``_text_from``): a long stream appending to
        # one string copied all of it every token.
        self._joined = ""
        self._pieces: list[str] = []
        self._text_len = 0  # len(text)
        self._searched = 0  # text[:_searched] has been searched for stop strings
        # With stop strings, the text's last characters (_detokenize): the longest stop
        # string's length - 1 before the last step, and the last step's text.
        self._recent = ""
        self.logprobs = SampleLogprobsState(
            params.num_logprobs, decode_token if detokenize else None, params.flat_logprobs
        )
        self.finish_reason: FinishReason | None = None
        self.stop_reason: int | str | None = None
        self.pooled: PooledData | None = None  # a pooling request's result
        self.routed_experts: RoutedExperts | None = None  # from the scheduler's last output
        self.num_cached_tokens = 0
        self.num_cache_creation_tokens = 0  # from the first output that has scheduled_time
        self.num_preemptions = 0  # the scheduler's count, from the outputs that carry it
        self.scheduled_time: float | None = None  # first scheduled (from the scheduler)
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None
        self.finished_time: float | None = None
        # What DELTA outputs already handed out.
        self._sent_text = 0  # characters of text
        self._sent_tokens = 0  # token ids
        self._sent_logprobs = 0  # positions of logprobs
        self._sent_masks = 0  # positions of sampling_masks
        # --return-sampling-mask: each token's surviving ids, as the scheduler reported them
        # (its outputs that carry masks skip the plain lanes, so ``update`` sees them all).
        self.sampling_masks: list[list[int]] | None = None
        # The plain lane (update_plain, plain_delta): nothing to search or score per token.
        self.plain = not self._stops and params.num_logprobs is None
        # stream_interval: an output once this many new tokens accumulated (set by the
        # output processor; 1: every step). ``shown``: len(token_ids) at the last output.
        self.interval = 1
        self.shown = 0
        # (weight version, index of its first token) for each run of tokens one version
        # produced (note_version); token versions and vLLM's spans are read off it.
        self.version_starts: list[tuple[str, int]] = []

    @property
    def text(self) -> str:
        """The text so far (stop strings' truncation applied)."""
        if self._pieces:
            self._join_pieces()
        return self._joined

    @text.setter
    def text(self, value: str) -> None:
        self._joined = value
        self._pieces.clear()
        self._text_len = len(value)
        self._recent = ""  # (no longer the text's tail)

    def _append(self, piece: str) -> None:
        """Append to the text: O(1) per step; every PIECES_PER_JOIN pieces are joined
        (amortised, so a long text is copied once per that many steps, not each)."""
        pieces = self._pieces
        pieces.append(piece)
        self._text_len += len(piece)
        if len(pieces) >= PIECES_PER_JOIN:
            self._join_pieces()

    def _join_pieces(self) -> None:
        self._joined += "".join(self._pieces)
        self._pieces.clear()

    def _text_from(self, start: int) -> str:
        """``text[start:]`` without joining the whole text: from ``_recent`` when it holds
        it, else it copies the result and the last pieces that hold it (the per-step
        readers ask for a few tokens' worth)."""
        need = self._text_len - start
        if need <= 0:
            return ""
        recent = self._recent
        if need <= len(recent):  # (with stop strings: the held-back tail and the step)
            return recent[len(recent) - need :]
        pieces = self._pieces
        if pieces and len(pieces[-1]) >= need:  # (the usual case: the newest piece)
            last = pieces[-1]
            return last[len(last) - need :]
        got = 0  # characters in pieces[i:]
        i = len(pieces)
        while i and got < need:
            i -= 1
            got += len(pieces[i])
        tail = "".join(pieces[i:])
        if got >= need:
            return tail[got - need :]
        joined = self._joined
        return joined[len(joined) - (need - got) :] + tail

    def due(self) -> bool:
        """Whether this step's new tokens go out now (stream_interval > 1): the first
        output, or ``interval`` tokens since the last one; if so, counts them as shown.
        The caller sends a finished request's output regardless."""
        n = len(self.token_ids)
        if self.shown and n - self.shown < self.interval:
            return False
        self.shown = n
        return True

    @property
    def held(self) -> int:
        """Output tokens folded in but not sent yet (stream_interval); 0 once finished."""
        return 0 if self.finished else len(self.token_ids) - self.shown

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def note_version(self, version: str) -> None:
        """The tokens about to be appended were produced by weights ``version``."""
        starts = self.version_starts
        if not starts or starts[-1][0] != version:
            starts.append((version, len(self.token_ids)))

    def token_versions(self, start: int) -> list[str | None] | None:
        """The weight version of each token from ``start`` on (None: never reported)."""
        starts, end = self.version_starts, len(self.token_ids)
        if not starts:
            return None
        out: list[str | None] = [None] * max(0, min(starts[0][1], end) - start)
        for i, (version, first) in enumerate(starts):
            last = starts[i + 1][1] if i + 1 < len(starts) else end
            lo, hi = max(first, start), min(last, end)
            if hi > lo:
                out += [version] * (hi - lo)
        return out

    def version_spans(self) -> list[WeightVersionSpan] | None:
        """vLLM's spans over the output tokens (None when no version was reported)."""
        starts, end = self.version_starts, len(self.token_ids)
        if not starts:
            return None
        ends = [first for _, first in starts[1:]] + [end]
        return [WeightVersionSpan(v, s, e) for (v, s), e in zip(starts, ends, strict=True)]

    def update(self, out: EngineCoreOutput, now: float) -> bool:
        """Fold in one step's output; ``now`` is the step's timestamp.

        Returns True when a stop string ended a request the scheduler still runs: the
        caller must finish it there (FINISHED_STOPPED). Must not be called once finished.
        """
        assert not self.finished, f"{self.req_id} already finished"
        new = out.new_token_ids
        if out.num_cached_tokens:
            self.num_cached_tokens = out.num_cached_tokens
        if out.num_preemptions:
            self.num_preemptions = out.num_preemptions
        if self.scheduled_time is None:  # (a scheduler's first output carries both)
            self.scheduled_time = out.scheduled_time
            self.num_cache_creation_tokens = out.num_cache_creation_tokens
        if new:
            if self.first_token_time is None:
                self.first_token_time = now
            self.last_token_time = now
        self.logprobs.append(out.new_logprobs)
        if out.new_sampling_mask is not None:
            if self.sampling_masks is None:
                self.sampling_masks = []
            self.sampling_masks.extend(out.new_sampling_mask)
        if out.pooled is not None:
            self.pooled = out.pooled
        if out.routed_experts is not None:
            self.routed_experts = out.routed_experts
        if self._detok is None:
            self.token_ids.extend(new)
            stop = None
        else:
            stop = self._detokenize(new, out.finish_reason)
        if stop is not None:
            self._finish(FinishReason.STOP, stop, now)
            return not out.finished
        if out.finish_reason is not None:
            self._finish(out.finish_reason, out.stop_reason, now)
        return False

    def update_plain(self, out: EngineCoreOutput, now: float) -> None:
        """:meth:`update` for the common decode step, with less work per token: a
        ``plain`` request (no stop strings, no logprobs) gets one token and does not
        finish. The caller checks those conditions; the state ends up as ``update``
        leaves it (``_searched`` is only read when there are stop strings)."""
        _, piece = self._take_plain(out, now)
        if piece:
            self._append(piece)

    def plain_step(self, out: EngineCoreOutput, now: float) -> CompletionOutput:
        """:meth:`update_plain` then :meth:`plain_delta` in one call: the DELTA plain lane,
        once per request per decode step. When everything before this token was handed
        out (always, unless a caller mixes lanes), the delta is this token and the text it
        completes, built without slicing."""
        token_id, piece = self._take_plain(out, now)
        if self._sent_tokens == len(self.token_ids) - 1 and self._sent_text == self._text_len:
            self._sent_tokens += 1
            if piece:
                self._append(piece)
                self._sent_text += len(piece)
            starts = self.version_starts
            return CompletionOutput(
                index=self.index,
                text=piece,
                token_ids=[token_id],
                token_weight_versions=[starts[-1][0]] if starts else None,
            )
        if piece:
            self._append(piece)
        return self.plain_delta()

    @property
    def text_deferred(self) -> bool:
        """Whether the text is decoded once, at the end (no text per step to make)."""
        return self._detok is None or self._detok.deferred

    def take_silent(self, out: EngineCoreOutput, now: float) -> None:
        """:meth:`update_plain` for a ``plain`` request whose text is deferred
        (:attr:`text_deferred`, FINAL_ONLY): the stamps and the token, held for the
        decode at the end. The silent lane of the output processor, once per request per
        decode step."""
        token_id = self._take(out, now)
        if self._detok is not None:
            self._detok.hold(token_id)

    def _take_plain(self, out: EngineCoreOutput, now: float) -> tuple[int, str]:
        """The plain lane's bookkeeping for one token: stamps, the token appended; returns
        it and its text piece (not yet added to ``text``)."""
        token_id = self._take(out, now)
        detok = self._detok
        return token_id, "" if detok is None else detok.decode_next(token_id)

    def _take(self, out: EngineCoreOutput, now: float) -> int:
        """Stamps and the one new token appended (the plain and silent lanes); returns it."""
        if out.num_cached_tokens:
            self.num_cached_tokens = out.num_cached_tokens
        if out.num_preemptions:
            self.num_preemptions = out.num_preemptions
        if self.scheduled_time is None:  # (a scheduler's first output carries both)
            self.scheduled_time = out.scheduled_time
            self.num_cache_creation_tokens = out.num_cache_creation_tokens
        if self.first_token_time is None:
            self.first_token_time = now
        self.last_token_time = now
        token_id = out.new_token_ids[0]
        self.token_ids.append(token_id)
        return token_id

    def _detokenize(self, new: list[int], finish_reason: FinishReason | None) -> str | None:
        """Append ``new`` to token_ids and text; return the stop string that hit, if any.

        A step adds its text as one piece (:meth:`_append`) and searches the stop strings
        in that piece and the ``longest - 1`` characters before it (``_recent``), so it
        costs what it adds, not the length of the text so far."""
        detok = self._detok
        assert detok is not None
        min_tokens = self.params.min_tokens
        # The scheduler's stop token is kept out of the text (see module doc).
        skip_last = (
            finish_reason == FinishReason.STOP and not self.params.include_stop_str_in_output
        )
        before = self._text_len
        token_ids = self.token_ids
        if len(new) == 1 and not skip_last:  # (a decode step: one token)
            token_ids.append(new[0])
            text = detok.decode_next(new[0])
            if len(token_ids) <= min_tokens:
                self._searched = before + len(text)
        else:
            pieces: list[str] = []
            added = 0
            for i, token_id in enumerate(new):
                token_ids.append(token_id)
                if skip_last and i == len(new) - 1:
                    break
                piece = detok.decode_next(token_id)
                pieces.append(piece)
                added += len(piece)
                if len(token_ids) <= min_tokens:
                    self._searched = before + added
            text = "".join(pieces)
        if finish_reason is not None:
            text += detok.flush()
        stops = self._stops
        if not stops:
            if text:
                self._append(text)
            self._searched = self._text_len
            return None
        # _recent: the text's last characters, the longest - 1 before this step (every
        # match that ends in the new text starts there or later) and the step's own;
        # _text_from() reads what the caller has not been sent from it too.
        keep = stops.longest - 1
        recent = self._recent
        held = len(recent)
        if held > keep:
            recent = recent[held - keep :]
        elif held < keep and held < before:  # (reset by finish or the text setter)
            recent = self._text_from(before - keep if before > keep else 0)
        if text:
            self._append(text)
            recent += text
        self._recent = recent
        end = self._text_len
        searched = self._searched
        self._searched = end
        if searched >= end or len(token_ids) <= min_tokens:
            return None
        offset = end - len(recent)  # where recent starts in the text
        start = searched - keep
        if start > offset:
            window = recent[start - offset :]
        else:
            window, start = recent, offset
        found = stops.check(window, searched - start)
        if found is None:
            return None
        self.text = self.text[: found.truncate_to + start]
        return found.stop

    def _finish(self, reason: FinishReason, stop_reason: int | str | None, now: float) -> None:
        self.finish_reason = reason
        self.stop_reason = stop_reason
        self.finished_time = now

    def finish(self, reason: FinishReason, now: float) -> None:
        """End the request from outside (abort, error). Flushes pending text."""
        if self.finished:
            return
        if self._detok is not None:
            piece = self._detok.flush()
            if piece:
                self._append(piece)
                self._recent = ""  # (no longer the text's tail)
        self._finish(reason, None, now)

    def completion(self, kind: RequestOutputKind) -> CompletionOutput:
        """This sample's output for ``kind``; for DELTA, what is new since the last call.

        Text still held back for stop strings is not shown until the request finishes.
        """
        visible = self._stops.visible_len(self._text_len, self.finished)
        first_token = self._sent_tokens if kind == RequestOutputKind.DELTA else 0
        if kind == RequestOutputKind.DELTA:
            sent = self._sent_text
            text = self._text_from(sent)[: visible - sent] if visible > sent else ""
            self._sent_text = max(sent, visible)
            token_ids = self.token_ids[self._sent_tokens :]
            self._sent_tokens = len(self.token_ids)
            logprobs = self.logprobs.logprobs
            if logprobs is not None:
                logprobs = logprobs[self._sent_logprobs :]
                self._sent_logprobs += len(logprobs)
            masks = self.sampling_masks
            if masks is not None:
                masks = masks[self._sent_masks :]
                self._sent_masks += len(masks)
        else:
            text = self.text[:visible]
            token_ids = list(self.token_ids)
            logprobs = self.logprobs.logprobs
            logprobs = None if logprobs is None else logprobs[:]
            masks = None if self.sampling_masks is None else self.sampling_masks[:]
        return CompletionOutput(
            index=self.index,
            text=text,
            token_ids=token_ids,
            cumulative_logprob=self.logprobs.cumulative_logprob,
            logprobs=logprobs,
            finish_reason=None if self.finish_reason is None else str(self.finish_reason),
            stop_reason=self.stop_reason,
            weight_versions=self.version_spans() if self.finished else None,
            token_weight_versions=self.token_versions(first_token),
            sampling_mask=None if masks is None else SamplingMask(masks),
            routed_experts=self.routed_experts if self.finished else None,
        )

    def plain_delta(self) -> CompletionOutput:
        """:meth:`completion` for DELTA of an unfinished ``plain`` request (no stop string
        holds text back, no logprobs)."""
        sent = self._sent_text
        piece = self._text_from(sent) if self._text_len > sent else ""
        self._sent_text = max(sent, self._text_len)
        first_token = self._sent_tokens
        token_ids = self.token_ids[first_token:]
        self._sent_tokens = len(self.token_ids)
        return CompletionOutput(
            index=self.index,
            text=piece,
            token_ids=token_ids,
            token_weight_versions=self.token_versions(first_token),
        )
