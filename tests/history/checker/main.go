// The history checker: reads the driver's history (JSON lines), splits it
// into one partition per task and one per room, and searches each for a
// linearization under its model. For a partition that has none it prints
// the calls around the point where every attempt failed and writes an HTML
// timeline of it. The last line counts operations, faults and violations;
// the exit status is 1 when there is a violation.
//
//	checker [-html DIR] history.jsonl...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

type line struct {
	Kind     string           `json:"kind"`
	Client   string           `json:"client"`
	Op       string           `json:"op"`
	Task     *int64           `json:"task"`
	Room     string           `json:"room"`
	Call     int64            `json:"call"`
	Ret      int64            `json:"ret"`
	Res      string           `json:"res"`
	Code     string           `json:"code"`
	Why      string           `json:"why"`
	T        *json.RawMessage `json:"t"`
	Lease    *int64           `json:"lease"`
	Expected int64            `json:"expected"`
	Body     string           `json:"body"`
	ID       int64            `json:"id"`
	Since    int64            `json:"since"`
	Limit    int64            `json:"limit"`
	Msgs     [][2]interface{} `json:"msgs"`
	Fault    string           `json:"fault"`
	Target   string           `json:"target"`
	Start    int64            `json:"start"`
	End      int64            `json:"end"`
}

type partition struct {
	name  string
	model Model
	ops   []Op
}

func observed(raw *json.RawMessage) *Observed {
	if raw == nil {
		return nil
	}
	var v struct {
		Status   string  `json:"status"`
		Assignee *string `json:"assignee"`
		Version  int64   `json:"version"`
	}
	if json.Unmarshal(*raw, &v) != nil || v.Status == "" {
		return nil
	}
	o := &Observed{Status: v.Status, Version: v.Version}
	if v.Assignee != nil {
		o.Assignee = *v.Assignee
	}
	return o
}

func main() {
	htmlDir := flag.String("html", "", "write an HTML timeline of each violation into this folder")
	verbose := flag.Bool("v", false, "print every partition")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: checker [-html DIR] [-v] history.jsonl...")
		os.Exit(2)
	}
	totalOps, totalFaults, violations := 0, 0, 0
	for _, path := range flag.Args() {
		ops, faults, parts := load(path)
		totalOps += ops
		totalFaults += len(faults)
		byKind := map[string]int{}
		for _, f := range faults {
			byKind[f.Fault]++
		}
		fmt.Printf("%s: %d operations in %d partitions, faults %v\n", path, ops, len(parts), byKind)
		for _, p := range parts {
			t0 := time.Now()
			r := Check(p.model, p.ops)
			if *verbose {
				fmt.Printf("  %s: %d ops, %v, %s\n", p.name, len(p.ops), r.Ok, time.Since(t0).Round(time.Millisecond))
			}
			if r.Ok {
				continue
			}
			violations++
			report(path, p, r, faults)
			if *htmlDir != "" {
				_ = os.MkdirAll(*htmlDir, 0o755)
				name := filepath.Join(*htmlDir, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))+"-"+strings.ReplaceAll(p.name, " ", "-")+".html")
				if err := writeHTML(name, p, r, faults); err == nil {
					fmt.Printf("  timeline: %s\n", name)
				}
			}
		}
	}
	fmt.Printf("checker: %d operations, %d faults, %d violations\n", totalOps, totalFaults, violations)
	if violations > 0 {
		os.Exit(1)
	}
}

// load reads one history: its op count, its faults and its partitions.
func load(path string) (int, []line, []partition) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer f.Close()
	var all []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			fmt.Fprintf(os.Stderr, "%s: bad line: %v\n", path, err)
			os.Exit(2)
		}
		all = append(all, l)
	}
	// A post whose answer was lost is known by its body when a read saw it:
	// it took effect, with that id, at some time after its call.
	seen := map[string]int64{}
	for _, l := range all {
		if l.Kind == "op" && l.Op == "read_messages" && l.Res == "ok" {
			for _, m := range l.Msgs {
				id, _ := m[0].(float64)
				body, _ := m[1].(string)
				seen[body] = int64(id)
			}
		}
	}
	var faults []line
	tasks := map[int64]*partition{}
	rooms := map[string]*partition{}
	ops := 0
	for i, l := range all {
		switch l.Kind {
		case "fault":
			faults = append(faults, l)
			continue
		case "op":
		default:
			continue
		}
		ops++
		ret := l.Ret
		if l.Res == "unknown" {
			ret = Never
		}
		op := Op{Client: l.Client, Call: l.Call, Return: ret, Index: i}
		switch l.Op {
		case "post", "read_messages":
			in := LogIn{Op: "read", Since: l.Since, Limit: l.Limit}
			out := LogOut{Res: l.Res, ID: l.ID}
			if l.Op == "post" {
				in = LogIn{Op: "post", Body: l.Body}
				if l.Res == "unknown" {
					id, ok := seen[l.Body]
					if !ok {
						// Never seen: it did not happen, or after every read.
						continue
					}
					out = LogOut{Res: "ok", ID: id}
				}
			}
			for _, m := range l.Msgs {
				id, _ := m[0].(float64)
				body, _ := m[1].(string)
				out.Msgs = append(out.Msgs, Msg{int64(id), body})
			}
			op.Input, op.Output = in, out
			p := rooms[l.Room]
			if p == nil {
				p = &partition{name: "room " + l.Room, model: LogModel}
				rooms[l.Room] = p
			}
			p.ops = append(p.ops, op)
		default:
			if l.Task == nil {
				// A create whose answer was lost: no one knows its id.
				continue
			}
			op.Input = TaskIn{Op: l.Op, Agent: l.Client, Leased: l.Lease != nil, Expected: l.Expected}
			code := l.Code
			if strings.Contains(l.Why, "changing too fast") {
				// Given up after too many lost races: nothing written, and
				// nothing said about the task.
				code = "busy"
			}
			op.Output = TaskOut{Res: l.Res, T: observed(l.T), Code: code}
			p := tasks[*l.Task]
			if p == nil {
				p = &partition{name: fmt.Sprintf("task %d", *l.Task), model: TaskModel}
				tasks[*l.Task] = p
			}
			p.ops = append(p.ops, op)
		}
	}
	var parts []partition
	ids := make([]int64, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		parts = append(parts, *tasks[id])
	}
	for _, p := range rooms {
		parts = append(parts, *p)
	}
	return ops, faults, parts
}

// stuck is the op no attempt could place: the first by call time that is
// not in the longest linearizable prefix.
func stuck(p partition, r Result) int {
	in := map[int]bool{}
	for _, i := range r.Longest {
		in[i] = true
	}
	best := -1
	for i, op := range p.ops {
		if !in[i] && (best < 0 || op.Call < p.ops[best].Call) {
			best = i
		}
	}
	return best
}

func fmtTime(us int64, t0 int64) string {
	if us == Never {
		return "     never"
	}
	return fmt.Sprintf("%10.3f", float64(us-t0)/1e6)
}

// report prints the partition's calls around the point of failure.
func report(path string, p partition, r Result, faults []line) {
	t0 := p.ops[0].Call
	for _, op := range p.ops {
		if op.Call < t0 {
			t0 = op.Call
		}
	}
	s := stuck(p, r)
	fmt.Printf("VIOLATION in %s (%s): no order of its %d calls fits the model\n", p.name, path, len(p.ops))
	fmt.Printf("  longest linearizable prefix: %d calls; the model is then in:", len(r.Longest))
	for _, st := range r.After {
		fmt.Printf(" [%v]", st)
	}
	fmt.Println()
	tail := r.Longest
	if len(tail) > 8 {
		tail = tail[len(tail)-8:]
	}
	fmt.Println("  its last calls, in linearization order:")
	for _, i := range tail {
		op := p.ops[i]
		fmt.Printf("    %s..%s s  %s\n", fmtTime(op.Call, t0), fmtTime(op.Return, t0), p.model.Describe(&op))
	}
	if s < 0 {
		return
	}
	at := p.ops[s].Call
	fmt.Printf("  calls around the first one that fits nowhere (marked >>), seconds since the partition's first call:\n")
	order := make([]int, len(p.ops))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p.ops[order[a]].Call < p.ops[order[b]].Call })
	pos := 0
	for k, i := range order {
		if i == s {
			pos = k
		}
	}
	lo, hi := pos-12, pos+8
	if lo < 0 {
		lo = 0
	}
	if hi > len(order) {
		hi = len(order)
	}
	for _, i := range order[lo:hi] {
		op := p.ops[i]
		mark := "  "
		if i == s {
			mark = ">>"
		}
		fmt.Printf("  %s %s..%s s  %s\n", mark, fmtTime(op.Call, t0), fmtTime(op.Return, t0), p.model.Describe(&op))
	}
	for _, f := range faults {
		if f.Start <= at+5e6 && f.End >= at-5e6 {
			fmt.Printf("  fault nearby: %s %s %s..%s s\n", f.Fault, f.Target, fmtTime(f.Start, t0), fmtTime(f.End, t0))
		}
	}
}
