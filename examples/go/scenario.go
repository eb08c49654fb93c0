package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Scenario is examples/scenario.json: a scripted conversation and what the
// server must answer at each step. Its "about" field documents every key.
type Scenario struct {
	User  string `json:"user"`
	Steps []Step `json:"steps"`
}

// Step is one step of the conversation: a ListTools call, or the model's
// next assistant message.
type Step struct {
	Name      string             `json:"name"`
	ListTools *ListToolsExpect   `json:"list_tools"`
	Assistant *AssistantMessage  `json:"assistant"`
	Cancel    *CancelAfter       `json:"cancel"`
	Expect    *BatchExpectations `json:"expect"`
}

// ListToolsExpect lists tools ListTools must declare.
type ListToolsExpect struct {
	ToolsInclude []ToolExpect `json:"tools_include"`
}

// ToolExpect is one tool's expected declaration.
type ToolExpect struct {
	Name     string   `json:"name"`
	ReadOnly bool     `json:"read_only"`
	Required []string `json:"required"`
}

// AssistantMessage is a message of the OpenAI Chat Completions API, as the
// model would send it. Tool calls are kept as raw JSON so that they go
// through client.FromOpenAIToolCalls like a real model's would.
type AssistantMessage struct {
	Role      string          `json:"role"`
	Content   *string         `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

// CancelAfter says when the runner cancels the batch.
type CancelAfter struct {
	CallID        string `json:"call_id"`
	AfterProgress int    `json:"after_progress"`
}

// BatchExpectations is what one batch's stream must show.
type BatchExpectations struct {
	RPCStatus          string                  `json:"rpc_status"`
	RPCMessageContains string                  `json:"rpc_message_contains"`
	Events             string                  `json:"events"`
	Lanes              []LaneExpect            `json:"lanes"`
	Finished           map[string]uint32       `json:"finished"`
	Calls              map[string]*CallExpects `json:"calls"`
}

// LaneExpect is one lane of the expected plan.
type LaneExpect struct {
	CallIDs  []string `json:"call_ids"`
	Parallel bool     `json:"parallel"`
}

// CallExpects is what one call's events must show.
type CallExpects struct {
	Events   string          `json:"events"`
	Result   *ResultExpect   `json:"result"`
	Progress *ProgressExpect `json:"progress"`
}

// ResultExpect is a call's expected result. Pointers and nil maps mean
// "not checked".
type ResultExpect struct {
	IsError       *bool              `json:"is_error"`
	ErrorKind     string             `json:"error_kind"`
	ToolName      string             `json:"tool_name"`
	Text          *string            `json:"text"`
	TextContains  []string           `json:"text_contains"`
	Structured    json.RawMessage    `json:"structured"`
	StructuredMin map[string]float64 `json:"structured_min"`
}

// ProgressExpect is what a call's progress events must show.
type ProgressExpect struct {
	Total               *float64 `json:"total"`
	FirstMessage        *string  `json:"first_message"`
	LastMessageContains string   `json:"last_message_contains"`
}

// LoadScenario reads and parses a scenario file, refusing unknown keys so
// that a typo in an expectation cannot silently check nothing.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(data)
}

// ParseScenario parses a scenario.
func ParseScenario(data []byte) (*Scenario, error) {
	var s struct {
		About  []string `json:"about"`
		Server string   `json:"server"`
		Scenario
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if len(s.Steps) == 0 {
		return nil, fmt.Errorf("scenario: no steps")
	}
	return &s.Scenario, nil
}
