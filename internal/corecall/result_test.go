package corecall

import (
	"encoding/json"
	"testing"

	"gotest.tools/v3/assert"
)

// resultBodies are 422 answers whose result answerResult must read as
// encoding/json does.
var resultBodies = []string{
	`{"result":"INSUFFICIENT_FUNDS"}`,
	`{"guid":"abc","result":"NO_ACCOUNT","detail":{"result":"inner"}}`,
	`{"RESULT":"LIMIT_EXCEEDED"}`,
	`{"result":"NO_ACCOUNT","result":null}`,
	`{"result":null}`,
	`{"result":"a\u0042c"}`,
	`{"result":5}`,
	`{"result":"x"`,
	`[]`,
	`null`,
	``,
}

func TestAnswerResultAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range resultBodies {
		checkAnswerResult(t, []byte(body))
	}
}

func FuzzAnswerResult(f *testing.F) {
	for _, body := range resultBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAnswerResult(t, body) })
}

func checkAnswerResult(t *testing.T, body []byte) {
	t.Helper()
	got, err := answerResult(body)
	var j struct {
		Result string `json:"result"`
	}
	jerr := json.Unmarshal(body, &j)
	assert.Equal(t, err == nil, jerr == nil, "%q: %v, encoding/json: %v", body, err, jerr)
	if err == nil {
		assert.Equal(t, got, j.Result, "%q", body)
	}
}
