package workerclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// maxCompletionsPerCall is the gateway's limit on one batch completion.
const maxCompletionsPerCall = 500

// completionBatcher sends the completions of a worker's slots together: a
// completion that finishes while a call is in flight goes in the next call
// (POST /v1/attempts/complete), and each is answered on its own. Nothing
// waits on a timer: a lone completion is sent at once.
type completionBatcher struct {
	client *apiclient.ClientWithResponses
	base   context.Context // values only; calls are bounded by callTimeout
	// next, when set, lets a call also lease the slots its completions
	// free (the contract's `next`), so that a busy worker sends one
	// request per task instead of a completion and a poll.
	next nextLeaser

	mu      sync.Mutex
	queue   []*queuedCompletion
	sending bool
}

type queuedCompletion struct {
	item   apiclient.CompletionItem
	answer chan completionAnswer
}

type completionAnswer struct {
	res *apiclient.CompleteResponse
	err error
}

// complete sends one completion in the next call and returns its answer:
// the gateway's result, an *APIError with the status and problem this
// completion alone would have got, or the whole call's error.
func (b *completionBatcher) complete(ctx context.Context, item apiclient.CompletionItem) (*apiclient.CompleteResponse, error) {
	q := &queuedCompletion{item: item, answer: make(chan completionAnswer, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, q)
	start := !b.sending
	b.sending = true
	b.mu.Unlock()
	if start {
		go b.send()
	}
	select {
	case a := <-q.answer:
		return a.res, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("complete attempt: %w", context.Cause(ctx))
	}
}

// send makes calls until the queue is empty.
func (b *completionBatcher) send() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxCompletionsPerCall)
		if n == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
		group := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.sendGroup(group)
	}
}

// nextLeaser is the worker side of a completion call's `next`.
type nextLeaser interface {
	// reserveNext is asked before a call how many leases it may take for
	// the slots the listed attempts' completions free: 0 for none.
	reserveNext(attempts []uuid.UUID) int
	// nextAnswered is told how a call that reserved n ended: the attempts
	// it completed (answered 200) and the leases it carried (none when
	// the call failed), sent being when the call went out. It is told
	// before any completion of the call is answered.
	nextAnswered(completed []uuid.UUID, leases []apiclient.Lease, n int, sent time.Time)
	// nextRefused is told that the gateway refused a call for its `next`
	// alone (a release that predates it).
	nextRefused()
}

func (b *completionBatcher) sendGroup(group []*queuedCompletion) {
	body := apiclient.CompleteManyRequest{Completions: make([]apiclient.CompletionItem, len(group))}
	ids := make([]uuid.UUID, len(group))
	for i, q := range group {
		body.Completions[i], ids[i] = q.item, q.item.AttemptId
	}
	reserved := 0
	if b.next != nil {
		reserved = b.next.reserveNext(ids)
	}
	if reserved > 0 {
		body.Next = &apiclient.NextLeases{MaxTasks: &reserved} // answered at once: no wait
	}
	sent := time.Now()
	resp, err := b.call(body)
	if reserved > 0 && isBadRequest(err) {
		body.Next = nil
		if resp, err = b.call(body); !isBadRequest(err) {
			b.next.nextRefused()
		}
	} else if reserved > 0 && err != nil && isTransient(err) {
		// The answer may have been lost after leases were granted: only
		// the very same call (the same attempts) replays them, so repeat
		// it here rather than let each completion retry on its own.
		ctx, cancel := context.WithTimeout(b.base, completeRetryWindow)
		err = retry(ctx, callRetry, func(context.Context) (err error) {
			sent = time.Now()
			resp, err = b.call(body)
			return err
		})
		cancel()
	}
	var completed []uuid.UUID
	var leases []apiclient.Lease
	if err == nil {
		for i, a := range resp.JSON200.Completions {
			if a.Status == http.StatusOK {
				completed = append(completed, ids[i])
			}
		}
		if body.Next != nil && resp.JSON200.Leases != nil {
			leases = *resp.JSON200.Leases
		}
	}
	if reserved > 0 {
		b.next.nextAnswered(completed, leases, reserved, sent)
	}
	if err != nil {
		for _, q := range group {
			q.answer <- completionAnswer{err: err}
		}
		return
	}
	for i, a := range resp.JSON200.Completions {
		group[i].answer <- answerOf(a)
	}
}

// call sends one batch completion and checks its answer.
func (b *completionBatcher) call(body apiclient.CompleteManyRequest) (*apiclient.CompleteAttemptsResponse, error) {
	ctx, cancel := context.WithTimeout(b.base, callTimeout)
	defer cancel()
	resp, err := b.client.CompleteAttemptsWithResponse(ctx, body)
	if err == nil {
		err = checkResponse("complete attempts", resp.HTTPResponse, resp.Body)
	}
	if err == nil && (resp.JSON200 == nil || len(resp.JSON200.Completions) != len(body.Completions)) {
		err = fmt.Errorf("complete attempts: unexpected answer %s", resp.Status())
	}
	return resp, err
}

// isBadRequest reports a 400 answer: the request itself is wrong.
func isBadRequest(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusBadRequest
}

// answerOf turns one completion's answer into what a call for it alone
// would have returned.
func answerOf(a apiclient.CompletionAnswer) completionAnswer {
	if a.Status == http.StatusOK && a.Result != nil {
		return completionAnswer{res: a.Result}
	}
	e := &APIError{Op: "complete attempt", Status: a.Status, Title: http.StatusText(a.Status)}
	if p := a.Problem; p != nil {
		e.Code, e.Title = p.Code, p.Title
		if p.Detail != nil {
			e.Detail = *p.Detail
		}
		if p.RequestId != nil {
			e.RequestID = *p.RequestId
		}
	}
	return completionAnswer{err: e}
}
