package httpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/toolwire/toolwire/tools"
)

// requester runs the calls of one HTTP tool: it fills its templates from
// the arguments and sends the request with the request layer (Sender).
type requester struct {
	method  string
	url     *urlTemplate
	body    *bodyTemplate // nil: the unused arguments, for methods with a body
	path    []step
	rawBody bool // no response_path: the body is the result
	send    Sender
}

func (r *requester) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	doc, err := decodeJSON(call.Arguments)
	if err != nil {
		return nil, fmt.Errorf("decoding arguments: %w", err)
	}
	args, _ := doc.(map[string]any)
	withBody := hasBody(r.method)
	u, err := r.url.build(args, !withBody)
	if err != nil {
		if ae := (*ArgumentError)(nil); errors.As(err, &ae) {
			return InvalidArguments(err), nil
		}
		return tools.Errorf("%v", err), nil
	}
	req := Request{Method: r.method, URL: u}
	if withBody {
		if req.Body, err = r.requestBody(args); err != nil {
			return nil, err
		}
	}
	resp, res, err := r.send.Send(ctx, req)
	if resp == nil {
		return res, err
	}
	if r.method == http.MethodHead {
		return resp.Result(tools.Text(fmt.Sprintf("HTTP %s; Content-Type %q; Content-Length %d", resp.StatusLine, resp.Header.Get("Content-Type"), resp.ContentLength))), nil
	}
	if r.rawBody {
		return resp.Text(), nil
	}
	// A 2xx answer response_path cannot apply to is still the answer: its
	// text, with why in details, never an error (the request may have
	// done what it was asked; a retry would do it twice).
	if resp.Truncated {
		why := fmt.Sprintf("the response is larger than %d bytes, too large to select response_path from", resp.MaxBytes)
		if resp.CutOff != "" {
			why = "the response was cut off, so response_path does not apply"
		}
		res := resp.Text()
		res.Details = resp.detailsWith(why)
		return res, nil
	}
	v, err := decodeJSON(resp.Body)
	if err != nil {
		res := resp.Text()
		res.Details = resp.detailsWith(fmt.Sprintf("the response is not JSON (%v), so response_path does not apply", err))
		return res, nil
	}
	return resp.Result(tools.Text(resultText(selectPath(v, r.path)))), nil
}

// requestBody is the template filled from args, or else the declared
// arguments no URL placeholder used.
func (r *requester) requestBody(args map[string]any) ([]byte, error) {
	if r.body != nil {
		return r.body.fill(args)
	}
	rest := make(map[string]any, len(args))
	for k, v := range args {
		if !r.url.used[k] && r.url.declared[k] {
			rest[k] = v
		}
	}
	return json.Marshal(rest)
}
