package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolwire/toolwire/store"
)

// Deps.Vars (store.Vars: scoped variables with a TTL) has three users in
// the engine, each in scopes of its own so that none reads another's:
//
//   - session variables (sessionVars, for a tool's tools.Session), scoped
//     by caller and session ID: `"<caller>"/<session_id>`; the leading
//     quote keeps them apart from the mailboxes;
//   - the approval mailbox (approvalMail): a held call's announcement, and
//     the decision taken on another replica, under `approval:<batch_id>`;
//   - the cancel mailbox (cancelMail): a cancellation asked on a replica
//     other than the one running a detached batch, under `batch:<log>`.
//
// The scopes, names and values are the store's format, which replicas of
// different versions share: change them only with a migration. So are the
// topics of the notices that follow a write to a mailbox (signals.go).

// sessionScope is the scope of the variables of caller's session id.
func sessionScope(caller, id string) string { return strconv.Quote(caller) + "/" + id }

// approvalMail is where a held call is announced, so that a replica other
// than its batch's can check who resolves it, and where that replica
// leaves the decision, which the waiting call looks for (approval.go).
type approvalMail struct{ vars store.Vars }

func approvalScope(batchID string) string { return "approval:" + batchID }

// decisionPrefix begins the name of a call's decision in its batch's
// scope; its announcement's name is its call ID. So a call whose ID
// begins with it is not announced: its announcement would have the name
// of another call's decision (call "decision:w"'s, call "w"'s), and one
// would be read, and cleared, as the other, a decision for "w" passing
// for an announcement that names no caller. Such a call is resolved on
// its batch's replica only; announcements and decisions never share a
// name.
const decisionPrefix = "decision:"

// announced reports whether a call of this ID is announced in the mailbox.
func announced(callID string) bool { return !strings.HasPrefix(callID, decisionPrefix) }

// announce announces call callID of batch batchID as waiting, for ttl.
func (m approvalMail) announce(ctx context.Context, batchID, callID string, p pendingApproval, ttl time.Duration) error {
	if !announced(callID) {
		return fmt.Errorf("the call's ID begins with %q, which names decisions in the store", decisionPrefix)
	}
	v, _ := json.Marshal(p)
	return m.vars.SetVar(ctx, approvalScope(batchID), callID, v, ttl)
}

// pending returns what announce announced; false when nothing is.
func (m approvalMail) pending(ctx context.Context, batchID, callID string) (pendingApproval, bool, error) {
	var p pendingApproval
	if !announced(callID) {
		return p, false, nil
	}
	v, ok, err := m.vars.GetVar(ctx, approvalScope(batchID), callID)
	if err != nil || !ok {
		return p, false, err
	}
	return p, json.Unmarshal(v, &p) == nil, nil
}

// decide leaves d for the waiting call, for an hour, unless a decision
// was left already (false): the first decision stands, whichever replica
// took it.
func (m approvalMail) decide(ctx context.Context, batchID, callID string, d decision) (bool, error) {
	v, _ := json.Marshal(d)
	return m.vars.AddVar(ctx, approvalScope(batchID), decisionPrefix+callID, v, time.Hour)
}

// fresh removes what a wait of the call before this one left (its tool
// may ask more than once): the mark that it waits no more, which is no
// decision for this one. Once, before the first announcement: a
// renewal must not remove a decision left meanwhile.
func (m approvalMail) fresh(ctx context.Context, batchID, callID string) error {
	return m.vars.DeleteVar(ctx, approvalScope(batchID), decisionPrefix+callID)
}

// replace leaves d for the waiting call in place of what is there.
func (m approvalMail) replace(ctx context.Context, batchID, callID string, d decision) error {
	v, _ := json.Marshal(d)
	return m.vars.SetVar(ctx, approvalScope(batchID), decisionPrefix+callID, v, time.Hour)
}

// decision returns the decision left for the call; false when none is
// (or only the mark of a wait that ended), or the store did not answer
// (err).
func (m approvalMail) decision(ctx context.Context, batchID, callID string) (decision, bool, error) {
	var d decision
	v, ok, err := m.vars.GetVar(ctx, approvalScope(batchID), decisionPrefix+callID)
	return d, err == nil && ok && json.Unmarshal(v, &d) == nil && !d.Over, err
}

// overMark is what clear leaves in place of a decision, for as long as a
// decider who saw the announcement may still be on its way to decide.
const overMark = time.Minute

// clear removes the call's announcement once it waits no more, and
// leaves in place of its decision a mark that it is over: a decider who
// read the announcement just before is then told the call was resolved
// already or waits no more, where it would have added a decision nobody
// takes and been told it was.
func (m approvalMail) clear(ctx context.Context, batchID, callID string) {
	if announced(callID) {
		_ = m.vars.DeleteVar(ctx, approvalScope(batchID), callID)
	}
	_ = m.vars.SetVar(ctx, approvalScope(batchID), decisionPrefix+callID, []byte(`{"over":true}`), overMark)
}

// cancelMail is where Cancel, on a replica other than the one running a
// detached batch, asks its owner to cancel it; the owner, notified
// (signals.go), looks at once, and also now and then as it renews its
// lease (batchLog.renewed).
type cancelMail struct{ vars store.Vars }

// cancelScope is the scope of the requests to the owner of the batch
// whose log is named log.
func cancelScope(log string) string { return "batch:" + log }

// request asks for the cancellation of the batch whose log is named log,
// with reason, for ttl.
func (m cancelMail) request(ctx context.Context, log, reason string, ttl time.Duration) error {
	v, _ := json.Marshal(reason)
	return m.vars.SetVar(ctx, cancelScope(log), "cancel", v, ttl)
}

// requested returns the reason of a cancellation asked for the batch
// whose log is named log; false when none is, or the store did not
// answer (err).
func (m cancelMail) requested(ctx context.Context, log string) (string, bool, error) {
	v, ok, err := m.vars.GetVar(ctx, cancelScope(log), "cancel")
	if err != nil || !ok {
		return "", false, err
	}
	var reason string
	_ = json.Unmarshal(v, &reason)
	return reason, true, nil
}
