package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolwire/toolwire/tools"
)

func TestNoSession(t *testing.T) {
	ctx := context.Background()
	for name, call := range map[string]*tools.Call{
		"NewCall": tools.NewCall("c1", "t", json.RawMessage(`{}`), nil),
		"nil":     nil,
	} {
		s := call.Session()
		if _, _, err := s.Get(ctx, "x"); !errors.Is(err, tools.ErrNoSession) {
			t.Errorf("%s: Get = %v, want ErrNoSession", name, err)
		}
		if err := s.Set(ctx, "x", json.RawMessage(`1`)); !errors.Is(err, tools.ErrNoSession) {
			t.Errorf("%s: Set = %v, want ErrNoSession", name, err)
		}
		if err := s.Delete(ctx, "x"); !errors.Is(err, tools.ErrNoSession) {
			t.Errorf("%s: Delete = %v, want ErrNoSession", name, err)
		}
	}
}

func TestKeyFrom(t *testing.T) {
	type args struct {
		OrderID string `json:"order_id"`
	}
	key := tools.KeyFrom(func(a args) (string, bool) { return a.OrderID, a.OrderID != "" })
	for _, tc := range []struct {
		args   string
		want   string
		wantOK bool
	}{
		{`{"order_id":"o-1"}`, "o-1", true},
		{`{}`, "", false},
		{`[1]`, "", false},
	} {
		got, ok := key(json.RawMessage(tc.args))
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("key(%s) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.wantOK)
		}
	}
}
