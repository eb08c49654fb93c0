package tools_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolwire/toolwire/tools"
)

type weatherIn struct {
	City string `json:"city" jsonschema:"the city to look up"`
}

type weatherOut struct {
	TempC float64 `json:"temp_c"`
}

// A typed tool returns its output, and a Result when it wants its own
// content or details: Out still fills the structured content.
func ExampleTyped() {
	weather := tools.MustTyped("weather", "Current temperature in a city.",
		func(_ context.Context, _ *tools.Call, in weatherIn) (*tools.Result, weatherOut, error) {
			out := weatherOut{TempC: 21.5}
			res := tools.Text(fmt.Sprintf("%s: %.1f °C", in.City, out.TempC))
			res.Details = json.RawMessage(`{"station":"LFPG"}`)
			return res, out, nil
		})
	res, err := weather.Handler(context.Background(), tools.NewCall("1", "weather", json.RawMessage(`{"city":"Paris"}`), nil))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(weather.InputSchema))
	fmt.Println(res.Content[0].Text)
	fmt.Println(string(res.StructuredContent), string(res.Details))
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"the city to look up"}},"required":["city"],"additionalProperties":false}
	// Paris: 21.5 °C
	// {"temp_c":21.5} {"station":"LFPG"}
}
