package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// parseLabelChanges reads kubectl label's arguments: KEY=VALUE sets a
// label, KEY- removes it. The gateway validates keys and values.
func parseLabelChanges(args []string) (apiclient.LabelChanges, error) {
	changes := apiclient.LabelChanges{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == "" {
				return nil, usageError{fmt.Sprintf("label %q: the key is empty", a)}
			}
			changes[k] = &v
			continue
		}
		if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			changes[k] = nil
			continue
		}
		return nil, usageError{fmt.Sprintf("label %q: give KEY=VALUE to set a label or KEY- to remove it", a)}
	}
	return changes, nil
}

// parseSelector reads --selector: a JSON object as the API takes it (or
// @FILE), or kubectl's set-based syntax, comma-separated: "k=v" (or
// "k==v"), "k!=v", "k in (a,b)", "k notin (a,b)", "k" (exists), "!k" (does
// not exist).
func parseSelector(v string) (*apiclient.LabelSelector, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	if strings.HasPrefix(v, "{") || strings.HasPrefix(v, "@") {
		data := []byte(v)
		if name, ok := strings.CutPrefix(v, "@"); ok {
			var err error
			if data, err = os.ReadFile(name); err != nil {
				return nil, err
			}
		}
		var s apiclient.LabelSelector
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, usageError{fmt.Sprintf("--selector: not a label selector: %v", err)}
		}
		return &s, nil
	}
	labels := map[string]string{}
	var exprs []apiclient.LabelRequirement
	for _, term := range splitSelectorTerms(v) {
		term = strings.TrimSpace(term)
		bad := usageError{fmt.Sprintf("--selector: cannot read %q", term)}
		switch {
		case term == "":
			return nil, bad
		case strings.HasPrefix(term, "!"):
			exprs = append(exprs, apiclient.LabelRequirement{Key: strings.TrimSpace(term[1:]), Operator: apiclient.LabelDoesNotExist})
		case strings.Contains(term, "!="):
			k, val, _ := strings.Cut(term, "!=")
			exprs = append(exprs, apiclient.LabelRequirement{Key: strings.TrimSpace(k), Operator: apiclient.LabelNotIn,
				Values: &[]string{strings.TrimSpace(val)}})
		case strings.Contains(term, "="):
			k, val, _ := strings.Cut(term, "=")
			labels[strings.TrimSpace(k)] = strings.TrimSpace(strings.TrimPrefix(val, "="))
		case strings.Contains(term, "("):
			fields := strings.Fields(term[:strings.Index(term, "(")])
			inner, ok := strings.CutSuffix(strings.TrimSpace(term[strings.Index(term, "(")+1:]), ")")
			if len(fields) != 2 || !ok {
				return nil, bad
			}
			var op apiclient.LabelRequirementOperator
			switch fields[1] {
			case "in":
				op = apiclient.LabelIn
			case "notin":
				op = apiclient.LabelNotIn
			default:
				return nil, bad
			}
			var values []string
			for _, val := range strings.Split(inner, ",") {
				values = append(values, strings.TrimSpace(val))
			}
			exprs = append(exprs, apiclient.LabelRequirement{Key: fields[0], Operator: op, Values: &values})
		case strings.ContainsAny(term, " \t()"):
			return nil, bad
		default:
			exprs = append(exprs, apiclient.LabelRequirement{Key: term, Operator: apiclient.LabelExists})
		}
	}
	s := &apiclient.LabelSelector{}
	if len(labels) > 0 {
		s.MatchLabels = &labels
	}
	if len(exprs) > 0 {
		s.MatchExpressions = &exprs
	}
	return s, nil
}

// splitSelectorTerms splits at the commas outside parentheses.
func splitSelectorTerms(v string) []string {
	var terms []string
	depth, start := 0, 0
	for i, r := range v {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				terms = append(terms, v[start:i])
				start = i + 1
			}
		}
	}
	return append(terms, v[start:])
}

// labelsText shows labels as kubectl does: k=v, sorted, comma-separated.
func labelsText(labels apiclient.Labels) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// selectorText shows a selector in the syntax --selector reads.
func selectorText(s apiclient.LabelSelector) string {
	var parts []string
	if s.MatchLabels != nil {
		for _, k := range slices.Sorted(maps.Keys(*s.MatchLabels)) {
			parts = append(parts, k+"="+(*s.MatchLabels)[k])
		}
	}
	if s.MatchExpressions != nil {
		for _, r := range *s.MatchExpressions {
			var values []string
			if r.Values != nil {
				values = *r.Values
			}
			switch r.Operator {
			case apiclient.LabelIn:
				parts = append(parts, r.Key+" in ("+strings.Join(values, ",")+")")
			case apiclient.LabelNotIn:
				parts = append(parts, r.Key+" notin ("+strings.Join(values, ",")+")")
			case apiclient.LabelExists:
				parts = append(parts, r.Key)
			case apiclient.LabelDoesNotExist:
				parts = append(parts, "!"+r.Key)
			}
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}
