// Renders a TEMPLATE with Go's own text/template over the values Ollama hands a template for an
// OpenAI chat request, for tests/export/test_gotemplate_go.py: it checks mens's Go subset
// (mens/export/gotemplate.py) against the real engine. The types mirror the template-facing ones
// of ollama/ollama template/template.go (templateMessage, templateToolCall, templateArgs,
// templateTools, templateProperties) and api/types.go (ToolProperty, PropertyType), as
// mens/export/ollama.py models them; collate merges a run of one role's messages but tool ones.
// usage: render < {"template": "...", "messages": [...], "tools": [...]}
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
)

type PropertyType []string

func (pt PropertyType) MarshalJSON() ([]byte, error) {
	if len(pt) == 1 {
		return json.Marshal(pt[0])
	}
	return json.Marshal([]string(pt))
}

func (pt PropertyType) String() string {
	if len(pt) == 1 {
		return pt[0]
	}
	return fmt.Sprintf("%v", []string(pt))
}

func (pt *PropertyType) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*pt = []string{s}
		return nil
	}
	var a []string
	err := json.Unmarshal(b, &a)
	*pt = a
	return err
}

type ToolProperty struct {
	AnyOf       []ToolProperty `json:"anyOf,omitempty"`
	Type        PropertyType   `json:"type,omitempty"`
	Items       any            `json:"items,omitempty"`
	Description string         `json:"description,omitempty"`
	Enum        []any          `json:"enum,omitempty"`
	Required    []string       `json:"required,omitempty"`
}

type templateProperties map[string]ToolProperty

func (t templateProperties) String() string { b, _ := json.Marshal(t); return string(b) }

type templateParams struct {
	Type       string             `json:"type"`
	Defs       any                `json:"$defs,omitempty"`
	Items      any                `json:"items,omitempty"`
	Required   []string           `json:"required,omitempty"`
	Properties templateProperties `json:"properties"`
}

type templateToolFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  templateParams `json:"parameters"`
}

type templateTool struct {
	Type     string               `json:"type"`
	Items    any                  `json:"items,omitempty"`
	Function templateToolFunction `json:"function"`
}

func (t templateTool) String() string { b, _ := json.Marshal(t); return string(b) }

type templateTools []templateTool

func (t templateTools) String() string { b, _ := json.Marshal(t); return string(b) }

type templateArgs map[string]any

func (t templateArgs) String() string {
	if t == nil {
		return "{}"
	}
	b, _ := json.Marshal(t)
	return string(b)
}

type templateToolCallFunction struct {
	Index     int
	Name      string
	Arguments templateArgs
}

type templateToolCall struct {
	ID       string
	Function templateToolCallFunction
}

type templateMessage struct {
	Role, Content, Thinking string
	Images                  []string
	ToolCalls               []templateToolCall
	ToolName, ToolCallID    string
}

type request struct {
	Template string `json:"template"`
	Messages []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		Name       string  `json:"name"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []templateTool `json:"tools"`
}

func main() {
	in, _ := io.ReadAll(os.Stdin)
	var r request
	if err := json.Unmarshal(in, &r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var msgs []*templateMessage
	var system []string
	for _, m := range r.Messages {
		content := ""
		if m.Content != nil {
			content = *m.Content
		}
		if m.Role == "system" {
			system = append(system, content)
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == m.Role && m.Role != "tool" {
			msgs[n-1].Content += "\n\n" + content
			continue
		}
		tm := &templateMessage{Role: m.Role, Content: content, ToolCallID: m.ToolCallID}
		if m.Role == "tool" {
			tm.ToolName = m.Name
		}
		for _, c := range m.ToolCalls {
			raw := c.Function.Arguments
			var s string
			if json.Unmarshal(raw, &s) == nil {
				raw = json.RawMessage(s) // OpenAI's arguments string
			}
			var args map[string]any
			if err := json.Unmarshal(raw, &args); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			tm.ToolCalls = append(tm.ToolCalls, templateToolCall{ID: c.ID,
				Function: templateToolCallFunction{Name: c.Function.Name, Arguments: args}})
		}
		msgs = append(msgs, tm)
	}
	var tools templateTools
	if len(r.Tools) > 0 {
		tools = r.Tools
	}
	funcs := template.FuncMap{"json": func(v any) string { b, _ := json.Marshal(v); return string(b) }}
	t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(r.Template)
	if err != nil {
		fmt.Fprintln(os.Stderr, "parse:", err)
		os.Exit(1)
	}
	var out strings.Builder
	err = t.Execute(&out, map[string]any{"System": strings.Join(system, "\n\n"), "Messages": msgs,
		"Tools": tools, "Response": "", "Think": false, "ThinkLevel": "", "IsThinkSet": false})
	if err != nil {
		fmt.Fprintln(os.Stderr, "execute:", err)
		os.Exit(1)
	}
	fmt.Print(out.String())
}
