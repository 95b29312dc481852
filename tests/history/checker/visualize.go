// An HTML timeline of a partition that has no linearization: one row per
// client, each call a bar from its invocation to its completion (to the end
// for an unknown outcome), green when it is in the longest linearizable
// prefix the search found, red for the first call that fits nowhere, grey
// for the rest; faults as shaded bands. Hover a bar for the call.
package main

import (
	"fmt"
	"html"
	"os"
	"sort"
	"strings"
)

func writeHTML(path string, p partition, r Result, faults []line) error {
	in := map[int]int{}
	for k, i := range r.Longest {
		in[i] = k + 1
	}
	s := stuck(p, r)
	t0, t1 := p.ops[0].Call, p.ops[0].Call
	for _, op := range p.ops {
		if op.Call < t0 {
			t0 = op.Call
		}
		if op.Return != Never && op.Return > t1 {
			t1 = op.Return
		}
		if op.Call > t1 {
			t1 = op.Call
		}
	}
	span := float64(t1-t0) + 1
	clients := map[string]int{}
	var names []string
	for _, op := range p.ops {
		if _, ok := clients[op.Client]; !ok {
			clients[op.Client] = 0
			names = append(names, op.Client)
		}
	}
	sort.Strings(names)
	for i, n := range names {
		clients[n] = i
	}
	const width, row, left = 1400.0, 22.0, 70.0
	x := func(t int64) float64 {
		if t == Never {
			t = t1
		}
		return left + (float64(t-t0)/span)*(width-left-10)
	}
	height := float64(len(names))*row + 40
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><meta charset=utf-8><title>%s</title>", html.EscapeString(p.name))
	fmt.Fprintf(&b, "<style>body{font:13px sans-serif}rect.op:hover{stroke:#000}</style>")
	fmt.Fprintf(&b, "<h1>%s: no linearization</h1>", html.EscapeString(p.name))
	fmt.Fprintf(&b, "<p>%d calls. Longest linearizable prefix: %d calls (green, numbered in order). The first call that fits nowhere is red. Model state after the prefix:", len(p.ops), len(r.Longest))
	for _, st := range r.After {
		fmt.Fprintf(&b, " <code>%s</code>", html.EscapeString(fmt.Sprint(st)))
	}
	fmt.Fprintf(&b, "</p><svg width=%.0f height=%.0f>", width, height)
	for _, f := range faults {
		if f.End < t0 || f.Start > t1 {
			continue
		}
		fmt.Fprintf(&b, "<rect x=%.1f y=0 width=%.1f height=%.0f fill=#fde7b0><title>%s %s</title></rect>",
			x(f.Start), x(f.End)-x(f.Start)+1, height, html.EscapeString(f.Fault), html.EscapeString(f.Target))
	}
	for i, n := range names {
		fmt.Fprintf(&b, "<text x=2 y=%.0f>%s</text>", float64(i)*row+15, html.EscapeString(n))
	}
	for i, op := range p.ops {
		color := "#bbb"
		label := ""
		if k, ok := in[i]; ok {
			color, label = "#7c7", fmt.Sprint(k)
		}
		if i == s {
			color = "#e55"
		}
		y := float64(clients[op.Client]) * row
		w := x(op.Return) - x(op.Call)
		if w < 2 {
			w = 2
		}
		fmt.Fprintf(&b, "<rect class=op x=%.1f y=%.0f width=%.1f height=%.0f fill=%s><title>%s</title></rect>",
			x(op.Call), y+3, w, row-6, color, html.EscapeString(p.model.Describe(&op)))
		if label != "" && w > 14 {
			fmt.Fprintf(&b, "<text x=%.1f y=%.0f font-size=10>%s</text>", x(op.Call)+2, y+15, label)
		}
	}
	fmt.Fprintf(&b, "</svg><h2>Calls</h2><pre>")
	order := make([]int, len(p.ops))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, c int) bool { return p.ops[order[a]].Call < p.ops[order[c]].Call })
	for _, i := range order {
		op := p.ops[i]
		mark := "  "
		if i == s {
			mark = ">>"
		}
		fmt.Fprintf(&b, "%s %s..%s  %s\n", mark, fmtTime(op.Call, t0), fmtTime(op.Return, t0), html.EscapeString(p.model.Describe(&op)))
	}
	fmt.Fprintf(&b, "</pre>")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
