package main

import "testing"

func claim(agent string, call, ret int64, res string, status, owner string, v int64) Op {
	return Op{Client: agent, Call: call, Return: ret, Input: TaskIn{Op: "claim", Agent: agent},
		Output: TaskOut{Res: res, T: &Observed{status, owner, v}}}
}

func create(call, ret int64) Op {
	return Op{Client: "x", Call: call, Return: ret, Input: TaskIn{Op: "create", Agent: "x"},
		Output: TaskOut{Res: "ok", T: &Observed{"pending", "", 1}}}
}

// Two concurrent claims, one winner, the loser told who holds it: linearizable.
func TestOneWinnerIsLinearizable(t *testing.T) {
	ops := []Op{create(0, 1),
		claim("a", 10, 20, "ok", "in_progress", "a", 2),
		claim("b", 11, 21, "refused", "in_progress", "a", 2)}
	if !Check(TaskModel, ops).Ok {
		t.Fatal("one winner should check")
	}
}

// Two claims that both won: no order fits.
func TestTwoWinnersAreNot(t *testing.T) {
	ops := []Op{create(0, 1),
		claim("a", 10, 20, "ok", "in_progress", "a", 2),
		claim("b", 11, 21, "ok", "in_progress", "b", 3)}
	if Check(TaskModel, ops).Ok {
		t.Fatal("two winners must be a violation")
	}
}

// A leased claim may lapse, and then another agent wins.
func TestLapsedLeaseLetsAnotherClaim(t *testing.T) {
	leased := claim("a", 10, 20, "ok", "in_progress", "a", 2)
	leased.Input = TaskIn{Op: "claim", Agent: "a", Leased: true}
	ops := []Op{create(0, 1), leased, claim("b", 30, 40, "ok", "in_progress", "b", 4)}
	if !Check(TaskModel, ops).Ok {
		t.Fatal("a lapsed lease should let b claim")
	}
	ops[1].Input = TaskIn{Op: "claim", Agent: "a"}
	if Check(TaskModel, ops).Ok {
		t.Fatal("without a lease, b cannot claim")
	}
}

// Real time counts: a claim that completed before another began is first.
func TestRealTimeOrder(t *testing.T) {
	ops := []Op{create(0, 1),
		claim("b", 30, 40, "refused", "pending", "", 1),
		claim("a", 10, 20, "ok", "in_progress", "a", 2)}
	if Check(TaskModel, ops).Ok {
		t.Fatal("b read the task after a's claim completed: it cannot see it pending")
	}
}

// An acknowledged message missing from a later read is a violation.
func TestLostMessage(t *testing.T) {
	post := Op{Client: "a", Call: 0, Return: 5, Input: LogIn{Op: "post", Body: "m"}, Output: LogOut{Res: "ok", ID: 7}}
	read := Op{Client: "b", Call: 10, Return: 12, Input: LogIn{Op: "read", Since: 0, Limit: 10}, Output: LogOut{Res: "ok"}}
	if Check(LogModel, []Op{post, read}).Ok {
		t.Fatal("the read must show the acknowledged message")
	}
	read.Output = LogOut{Res: "ok", Msgs: []Msg{{7, "m"}}}
	if !Check(LogModel, []Op{post, read}).Ok {
		t.Fatal("the read shows it")
	}
	read.Output = LogOut{Res: "ok", Msgs: []Msg{{7, "m"}, {7, "m"}}}
	if Check(LogModel, []Op{post, read}).Ok {
		t.Fatal("a message shown twice is a violation")
	}
}
