// The models: a task of the board (owner, status, version, lease) and a
// room's message log. Each is the server's promise written as a sequential
// specification; the search asks whether the recorded calls fit it in some
// order that respects real time.
package main

import (
	"fmt"
	"strings"
)

// Observed is a task as an answer showed it.
type Observed struct {
	Status   string `json:"status"`
	Assignee string `json:"assignee"`
	Version  int64  `json:"version"`
}

// TaskIn is what a task call asked.
type TaskIn struct {
	Op       string // create, claim, release, update, submit, read
	Agent    string
	Leased   bool
	Expected int64
}

// TaskOut is what came back: ok, refused (with the task as it is, when the
// answer showed it) or unknown.
type TaskOut struct {
	Res  string
	T    *Observed
	Code string
}

// TaskState is a task as the model holds it.
type TaskState struct {
	Exists  bool
	Status  string
	Owner   string
	Version int64
	// Claimed with a lease, which may lapse at any moment (the model does
	// not keep time): the task then goes back to pending, version + 1.
	Leased bool
}

func (s TaskState) Key() string {
	return fmt.Sprintf("%t/%s/%s/%d/%t", s.Exists, s.Status, s.Owner, s.Version, s.Leased)
}

func (s TaskState) String() string {
	if !s.Exists {
		return "(not created)"
	}
	l := ""
	if s.Leased {
		l = ", leased"
	}
	return fmt.Sprintf("%s owner=%q v%d%s", s.Status, s.Owner, s.Version, l)
}

func shows(o *Observed, s TaskState) bool {
	return o != nil && o.Status == s.Status && o.Assignee == s.Owner && o.Version == s.Version
}

func taskStep(st State, op *Op) []State {
	s := st.(TaskState)
	in := op.Input.(TaskIn)
	out := op.Output.(TaskOut)
	// A lapsed lease is applied before the call (the server applies it on
	// read and in its sweeper).
	cands := []TaskState{s}
	if s.Exists && s.Status == "in_progress" && s.Leased {
		cands = append(cands, TaskState{true, "pending", "", s.Version + 1, false})
	}
	var next []State
	for _, c := range cands {
		next = append(next, taskStep1(c, in, out)...)
	}
	return next
}

func taskStep1(c TaskState, in TaskIn, out TaskOut) []State {
	// The change the call makes when it goes through, and whether it may.
	var done TaskState
	can := false
	switch in.Op {
	case "create":
		can = !c.Exists
		done = TaskState{true, "pending", "", 1, false}
	case "claim":
		can = c.Exists && c.Status == "pending"
		done = TaskState{true, "in_progress", in.Agent, c.Version + 1, in.Leased}
	case "release":
		can = c.Exists && c.Status == "in_progress" && c.Owner == in.Agent
		done = TaskState{true, "pending", "", c.Version + 1, false}
	case "update":
		can = c.Exists && c.Version == in.Expected
		done = c
		done.Version++
	case "submit":
		can = c.Exists && c.Status == "in_progress" && c.Owner == in.Agent
		done = TaskState{true, "done", in.Agent, c.Version + 1, false}
	case "read":
		can = c.Exists
		done = c
	}
	switch out.Res {
	case "ok":
		if can && shows(out.T, done) {
			return []State{done}
		}
		return nil
	case "refused":
		if out.T != nil {
			// Refused softly, with the task as it is: nothing written.
			if !can && shows(out.T, c) {
				return []State{c}
			}
			return nil
		}
		// A tool error: nothing written. A refused submit says it was not
		// the caller's to submit.
		if in.Op == "submit" && (out.Code == "conflict" || out.Code == "forbidden") && can {
			return nil
		}
		return []State{c}
	default: // unknown: it happened, or it did not
		if can && in.Op != "read" {
			return []State{c, done}
		}
		return []State{c}
	}
}

func describeTask(op *Op) string {
	in := op.Input.(TaskIn)
	out := op.Output.(TaskOut)
	arg := ""
	switch in.Op {
	case "claim":
		if in.Leased {
			arg = " (lease)"
		}
	case "update":
		arg = fmt.Sprintf(" expected_version=%d", in.Expected)
	}
	res := out.Res
	if out.T != nil {
		res += fmt.Sprintf(" -> %s assignee=%q v%d", out.T.Status, out.T.Assignee, out.T.Version)
	}
	if out.Code != "" {
		res += " [" + out.Code + "]"
	}
	return fmt.Sprintf("%s %s%s: %s", in.Agent, in.Op, arg, res)
}

// TaskModel is the model of one task.
var TaskModel = Model{
	Init:     func() []State { return []State{TaskState{}} },
	Step:     taskStep,
	Describe: describeTask,
}

// Msg is a message as a read showed it.
type Msg struct {
	ID   int64
	Body string
}

// LogIn is what a chat call asked.
type LogIn struct {
	Op    string // post, read
	Body  string
	Since int64
	Limit int64
}

// LogOut is what came back.
type LogOut struct {
	Res  string
	ID   int64
	Msgs []Msg
}

// logNode is a log as a persistent list, newest first: a step shares the
// log it extends.
type logNode struct {
	msg  Msg
	prev *logNode
	n    int
	hash uint64
}

// LogState is a room's log, in the order its messages became visible.
type LogState struct{ head *logNode }

func (s LogState) Key() string {
	if s.head == nil {
		return "0"
	}
	return fmt.Sprintf("%d/%d/%x", s.head.n, s.head.msg.ID, s.head.hash)
}

func (s LogState) String() string {
	if s.head == nil {
		return "empty log"
	}
	return fmt.Sprintf("%d messages, the last #%d %q", s.head.n, s.head.msg.ID, s.head.msg.Body)
}

func logStep(st State, op *Op) []State {
	s := st.(LogState)
	in := op.Input.(LogIn)
	out := op.Output.(LogOut)
	switch in.Op {
	case "post":
		if out.Res != "ok" {
			// Refused, or unknown and never seen: nothing visible.
			return []State{s}
		}
		// Ids grow in the order messages become visible: a reader reading
		// after an id misses nothing.
		if s.head != nil && out.ID <= s.head.msg.ID {
			return nil
		}
		n, h := 1, uint64(14695981039346656037)
		if s.head != nil {
			n, h = s.head.n+1, s.head.hash
		}
		h = (h ^ uint64(out.ID)) * 1099511628211
		h = (h ^ strHash(in.Body)) * 1099511628211
		return []State{LogState{&logNode{Msg{out.ID, in.Body}, s.head, n, h}}}
	default:
		if out.Res != "ok" {
			return []State{s}
		}
		// A read after `since` shows the log's messages after it, oldest
		// first, each once, up to the limit.
		var after []Msg
		for p := s.head; p != nil && p.msg.ID > in.Since; p = p.prev {
			after = append(after, p.msg)
		}
		for i, j := 0, len(after)-1; i < j; i, j = i+1, j-1 {
			after[i], after[j] = after[j], after[i]
		}
		if int64(len(after)) > in.Limit {
			after = after[:in.Limit]
		}
		if len(after) != len(out.Msgs) {
			return nil
		}
		for i := range after {
			if after[i] != out.Msgs[i] {
				return nil
			}
		}
		return []State{s}
	}
}

func describeLog(op *Op) string {
	in := op.Input.(LogIn)
	out := op.Output.(LogOut)
	if in.Op == "post" {
		if out.Res == "ok" {
			return fmt.Sprintf("%s post %q: ok #%d", op.Client, in.Body, out.ID)
		}
		return fmt.Sprintf("%s post %q: %s", op.Client, in.Body, out.Res)
	}
	if out.Res != "ok" {
		return fmt.Sprintf("%s read after #%d: %s", op.Client, in.Since, out.Res)
	}
	ids := make([]string, 0, len(out.Msgs))
	for _, m := range out.Msgs {
		ids = append(ids, fmt.Sprintf("#%d", m.ID))
	}
	shown := strings.Join(ids, " ")
	if len(ids) > 12 {
		shown = strings.Join(ids[:6], " ") + " … " + strings.Join(ids[len(ids)-6:], " ")
	}
	return fmt.Sprintf("%s read after #%d (limit %d): %d [%s]", op.Client, in.Since, in.Limit, len(ids), shown)
}

// LogModel is the model of one room's message log.
var LogModel = Model{
	Init:     func() []State { return []State{LogState{}} },
	Step:     logStep,
	Describe: describeLog,
}
