package warmseats

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seat := func(name, tmpl, node string, age int) Seat {
		return Seat{Name: name, UID: name + "-uid", Template: tmpl, Node: node, Created: t0.Add(-time.Duration(age) * time.Minute)}
	}
	tests := []struct {
		name    string
		want    int
		atLeast bool
		seats   []Seat
		plan    Plan
	}{
		{name: "none yet", want: 3, plan: Plan{Create: 3}},
		{name: "some there", want: 3, seats: []Seat{seat("a", "t", "n1", 5)}, plan: Plan{Create: 2}},
		{name: "enough", want: 1, seats: []Seat{seat("a", "t", "n1", 5)}, plan: Plan{}},
		{name: "too many: pending go first, then the newest", want: 1,
			seats: []Seat{seat("new", "t", "n2", 1), seat("pending", "t", "", 9), seat("old", "t", "n1", 5)},
			plan:  Plan{Delete: []Seat{seat("new", "t", "n2", 1), seat("pending", "t", "", 9)}}},
		{name: "another template is replaced", want: 1, seats: []Seat{seat("a", "old", "n1", 5)},
			plan: Plan{Create: 1, Delete: []Seat{seat("a", "old", "n1", 5)}}},
		{name: "none wanted", want: 0, seats: []Seat{seat("a", "t", "n1", 5)}, plan: Plan{Delete: []Seat{seat("a", "t", "n1", 5)}}},
		{name: "held: at least the floor, none deleted", want: 2, atLeast: true,
			seats: []Seat{seat("a", "t", "n1", 5)}, plan: Plan{Create: 1}},
		{name: "held: more than the floor stay", want: 1, atLeast: true,
			seats: []Seat{seat("a", "t", "n1", 5), seat("b", "t", "n2", 5)}, plan: Plan{}},
		{name: "a dead seat (rejected or evicted by its kubelet) is replaced", want: 2,
			seats: []Seat{seat("a", "t", "n1", 5), {Name: "d", UID: "d-uid", Template: "t", Node: "n2", Dead: true}},
			plan:  Plan{Create: 1, Delete: []Seat{{Name: "d", UID: "d-uid", Template: "t", Node: "n2", Dead: true}}}},
		{name: "held: a dead seat is still replaced", want: 1, atLeast: true,
			seats: []Seat{{Name: "d", UID: "d-uid", Template: "t", Dead: true}},
			plan:  Plan{Create: 1, Delete: []Seat{{Name: "d", UID: "d-uid", Template: "t", Dead: true}}}},
		{name: "a do-not-disrupt seat (an older berth's) is unprotected in place, even held", want: 2, atLeast: true,
			seats: []Seat{seat("a", "t", "n1", 5), {Name: "p", UID: "p-uid", Template: "t", Node: "n2", Ready: true, DoNotDisrupt: true}},
			plan:  Plan{Unprotect: []Seat{{Name: "p", UID: "p-uid", Template: "t", Node: "n2", Ready: true, DoNotDisrupt: true}}}},
		{name: "a do-not-disrupt seat deleted is not unprotected", want: 1,
			seats: []Seat{seat("old", "t", "n1", 9), {Name: "p", UID: "p-uid", Template: "t", Node: "n2", Created: t0, DoNotDisrupt: true}},
			plan:  Plan{Delete: []Seat{{Name: "p", UID: "p-uid", Template: "t", Node: "n2", Created: t0, DoNotDisrupt: true}}}},
		{name: "one kept, one created: the kept one unprotected", want: 2,
			seats: []Seat{{Name: "p", UID: "p-uid", Template: "t", Node: "n2", DoNotDisrupt: true}},
			plan:  Plan{Create: 1, Unprotect: []Seat{{Name: "p", UID: "p-uid", Template: "t", Node: "n2", DoNotDisrupt: true}}}},
		{name: "held: a stale seat is still replaced", want: 1, atLeast: true,
			seats: []Seat{seat("a", "old", "n1", 5)}, plan: Plan{Create: 1, Delete: []Seat{seat("a", "old", "n1", 5)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.plan, Decide(tc.want, tc.atLeast, "t", tc.seats)); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWants(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var w Wants
	a, b := Key{"ns", "a"}, Key{"ns", "b"}
	w.Set(a, 3, false, t0)
	w.Set(a, 1, true, t0.Add(time.Minute))   // held: at least the floor, the 3 asked for stand
	w.Set(a, 1, true, t0.Add(2*time.Minute)) // and through the whole hold (a cold start is several evaluations)
	w.Set(b, 1, true, t0)                    // held before anything was asked: the floor
	got := w.Fresh(t0.Add(30 * time.Second))
	if diff := cmp.Diff(map[Key]Want{a: {Seats: 3, AtLeast: true, At: t0.Add(2 * time.Minute)}}, got); diff != "" {
		t.Errorf("Fresh (-want +got):\n%s", diff)
	}
	if got := w.Fresh(t0); len(got) != 1 {
		t.Errorf("a stale want is forgotten: %v", got)
	}
}
