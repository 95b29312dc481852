// The linearizability search: Wing and Gong's algorithm with Lowe's cache
// of (linearized set, state), over one partition at a time (P-compositionality),
// as Porcupine runs it. Models may be nondeterministic: a step returns every
// state the system may be in after the operation (a lease that may or may
// not have lapsed, a call whose answer was lost), and the search carries the
// set of them.
package main

import (
	"math"
	"sort"
)

// Op is one recorded call: who, when (microseconds), what was asked and what
// came back. An op whose outcome is unknown returns at +infinity: it may take
// effect at any time after its call, or never.
type Op struct {
	Client string
	Call   int64
	Return int64
	Input  interface{}
	Output interface{}
	// Index in the history file's order, for reports.
	Index int
}

// State is a model state; Key must be equal exactly for equal states.
type State interface {
	Key() string
}

// Model is a sequential specification.
type Model struct {
	Init func() []State
	// Step returns every state that may follow `s` after `op`, none when
	// `op` as observed cannot follow `s`.
	Step func(s State, op *Op) []State
	// Describe is a one-line account of an op, for reports.
	Describe func(op *Op) string
}

// Result of checking one partition.
type Result struct {
	Ok bool
	// The longest prefix of a linearization the search found (indices into
	// the partition's ops) and the states after it.
	Longest []int
	After   []State
}

type node struct {
	op         int
	isCall     bool
	time       int64
	match      *node
	prev, next *node
}

type bitset []uint64

func newBitset(n int) bitset   { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)     { b[i/64] |= 1 << uint(i%64) }
func (b bitset) clear(i int)   { b[i/64] &^= 1 << uint(i%64) }
func (b bitset) clone() bitset { c := make(bitset, len(b)); copy(c, b); return c }
func (b bitset) popcount() int {
	n := 0
	for _, w := range b {
		for w != 0 {
			w &= w - 1
			n++
		}
	}
	return n
}
func (b bitset) equal(c bitset) bool {
	for i := range b {
		if b[i] != c[i] {
			return false
		}
	}
	return true
}
func (b bitset) hash() uint64 {
	h := uint64(14695981039346656037)
	for _, w := range b {
		h ^= w
		h *= 1099511628211
	}
	return h
}

// setKey is the canonical key of a set of states.
func setKey(states []State) string {
	keys := make([]string, len(states))
	for i, s := range states {
		keys[i] = s.Key()
	}
	sort.Strings(keys)
	k := ""
	for i, s := range keys {
		if i > 0 && s == keys[i-1] {
			continue
		}
		k += s + "|"
	}
	return k
}

func strHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// dedup keeps one state per key.
func dedup(states []State) []State {
	seen := map[string]bool{}
	out := states[:0:0]
	for _, s := range states {
		k := s.Key()
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out
}

// Check searches for a linearization of ops under m.
func Check(m Model, ops []Op) Result {
	n := len(ops)
	if n == 0 {
		return Result{Ok: true}
	}
	// The call and return events, in time order; at equal times calls come
	// first (such ops count as concurrent, never as ordered).
	nodes := make([]*node, 0, 2*n)
	for i := range ops {
		c := &node{op: i, isCall: true, time: ops[i].Call}
		r := &node{op: i, isCall: false, time: ops[i].Return}
		if r.time < c.time {
			r.time = c.time
		}
		c.match = r
		nodes = append(nodes, c, r)
	}
	sort.SliceStable(nodes, func(a, b int) bool {
		if nodes[a].time != nodes[b].time {
			return nodes[a].time < nodes[b].time
		}
		return nodes[a].isCall && !nodes[b].isCall
	})
	head := &node{}
	prev := head
	for _, nd := range nodes {
		prev.next = nd
		nd.prev = prev
		prev = nd
	}
	lift := func(e *node) {
		e.prev.next = e.next
		if e.next != nil {
			e.next.prev = e.prev
		}
		r := e.match
		r.prev.next = r.next
		if r.next != nil {
			r.next.prev = r.prev
		}
	}
	unlift := func(e *node) {
		r := e.match
		r.prev.next = r
		if r.next != nil {
			r.next.prev = r
		}
		e.prev.next = e
		if e.next != nil {
			e.next.prev = e
		}
	}
	type cached struct {
		lin bitset
		key string
	}
	type frame struct {
		e      *node
		states []State
	}
	cache := map[uint64][]cached{}
	lin := newBitset(n)
	states := dedup(m.Init())
	var stack []frame
	best := Result{}
	entry := head.next
	for head.next != nil {
		if entry.isCall {
			var next []State
			for _, s := range states {
				next = append(next, m.Step(s, &ops[entry.op])...)
			}
			if len(next) > 0 {
				next = dedup(next)
				l2 := lin.clone()
				l2.set(entry.op)
				k := setKey(next)
				h := l2.hash() ^ strHash(k)
				hit := false
				for _, c := range cache[h] {
					if c.key == k && c.lin.equal(l2) {
						hit = true
						break
					}
				}
				if !hit {
					cache[h] = append(cache[h], cached{l2, k})
					stack = append(stack, frame{entry, states})
					states = next
					lin.set(entry.op)
					lift(entry)
					if len(stack) > len(best.Longest) {
						best.Longest = make([]int, len(stack))
						for i, f := range stack {
							best.Longest[i] = f.e.op
						}
						best.After = states
					}
					entry = head.next
					continue
				}
			}
			entry = entry.next
		} else {
			// A return whose op is not linearized: undo the last choice.
			if len(stack) == 0 {
				return best
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			lin.clear(top.e.op)
			states = top.states
			unlift(top.e)
			entry = top.e.next
		}
	}
	return Result{Ok: true}
}

// Never is the return time of an op whose outcome is unknown.
const Never = math.MaxInt64
