package server

import (
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// fromAPISelector is a request's label selector for the store, which
// validates it.
func fromAPISelector(s *api.LabelSelector) *store.LabelSelector {
	if s == nil {
		return nil
	}
	out := &store.LabelSelector{}
	if s.MatchLabels != nil {
		out.MatchLabels = *s.MatchLabels
	}
	if s.MatchExpressions != nil {
		for _, r := range *s.MatchExpressions {
			req := store.LabelRequirement{Key: r.Key, Operator: string(r.Operator)}
			if r.Values != nil {
				req.Values = *r.Values
			}
			out.MatchExpressions = append(out.MatchExpressions, req)
		}
	}
	return out
}

// toAPISelector is a task's stored (canonical) label selector.
func toAPISelector(s *store.LabelSelector) *api.LabelSelector {
	if s == nil {
		return nil
	}
	out := &api.LabelSelector{}
	if len(s.MatchLabels) > 0 {
		out.MatchLabels = &s.MatchLabels
	}
	if len(s.MatchExpressions) > 0 {
		reqs := make([]api.LabelRequirement, len(s.MatchExpressions))
		for i, r := range s.MatchExpressions {
			reqs[i] = api.LabelRequirement{Key: r.Key, Operator: api.LabelRequirementOperator(r.Operator)}
			if len(r.Values) > 0 {
				reqs[i].Values = &r.Values
			}
		}
		out.MatchExpressions = &reqs
	}
	return out
}
