package workerclient

import (
	"context"
	"fmt"
	"net/http"
	"sync"

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

func (b *completionBatcher) sendGroup(group []*queuedCompletion) {
	items := make([]apiclient.CompletionItem, len(group))
	for i, q := range group {
		items[i] = q.item
	}
	ctx, cancel := context.WithTimeout(b.base, callTimeout)
	defer cancel()
	resp, err := b.client.CompleteAttemptsWithResponse(ctx, apiclient.CompleteManyRequest{Completions: items})
	if err == nil {
		err = checkResponse("complete attempts", resp.HTTPResponse, resp.Body)
	}
	if err == nil && (resp.JSON200 == nil || len(resp.JSON200.Completions) != len(group)) {
		err = fmt.Errorf("complete attempts: unexpected answer %s", resp.Status())
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
