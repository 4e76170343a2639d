package main

import (
	"fmt"
	"strings"

	. "github.com/dave/jennifer/jen"
)

// emitCodeMap writes one code map's translation functions, both ways.
func (gn generator) emitCodeMap(m *CodeMap) *File {
	f := gn.newFile(m.File)
	name := goName(m.Name)
	wires := make([]Code, len(m.Entries))
	for i, e := range m.Entries {
		wires[i] = Lit(e.Wire)
	}
	docComment(f, fmt.Sprintf("%sToCore translates a %s wire code into the core's id.", name, m.Title))
	f.Func().Id(name+"ToCore").Params(Id("wire").String()).Params(String(), Bool()).Block(
		Switch(Id("wire")).BlockFunc(func(g *Group) {
			for _, e := range m.Entries {
				g.Case(Lit(e.Wire)).Block(Return(Lit(e.Core), True()))
			}
		}),
		Return(Lit(""), False()),
	)
	docComment(f, fmt.Sprintf("%sFromCore translates the core's %s id into its wire code.", name, m.Title))
	f.Func().Id(name+"FromCore").Params(Id("core").String()).Params(String(), Bool()).Block(
		Switch(Id("core")).BlockFunc(func(g *Group) {
			for _, e := range m.Entries {
				g.Case(Lit(e.Core)).Block(Return(Lit(e.Wire), True()))
			}
		}),
		Return(Lit(""), False()),
	)
	docComment(f, fmt.Sprintf("%sCodes lists the %s wire codes in layout order.", name, m.Title))
	f.Func().Id(name + "Codes").Params().Index().String().Block(Return(Index().String().Values(wires...)))
	return f
}

// sourceConst is the Go name of a source constant, e.g. SourceReadTimeout.
func sourceConst(name string) string { return "Source" + goName(name) }

// rspConst is the Go name of a response-code constant, e.g. RspReadTimeout.
func rspConst(name string) string { return "Rsp" + goName(name) }

// emitRspCodes writes the response codes as typed constants and the
// source → code table, from rspmap.csv.
func (gn generator) emitRspCodes(l *Layouts) *File {
	f := gn.newFile(l.RspFile)
	codeOf := map[string]string{}
	for _, r := range l.Rsp {
		codeOf[r.Source] = r.Code
	}
	docComment(f, "Source is what happened to a request: the left column of rspmap.csv.")
	f.Type().Id("Source").String()
	f.Const().DefsFunc(func(g *Group) {
		for _, s := range knownSources {
			g.Id(sourceConst(s.Name)).Id("Source").Op("=").Lit(s.Name).Comment(s.Meaning)
		}
	})
	docComment(f, "RspCode is an LH-STD response code, the header's RSP_CODE.")
	f.Type().Id("RspCode").String()
	f.Const().DefsFunc(func(g *Group) {
		for _, s := range knownSources {
			g.Id(rspConst(s.Name)).Id("RspCode").Op("=").Lit(codeOf[s.Name]).Comment(s.Name)
		}
	})

	docComment(f, "Code returns the response code the source is answered with, or \"\" for an unknown source.")
	f.Func().Params(Id("s").Id("Source")).Id("Code").Params().Id("RspCode").Block(
		Switch(Id("s")).BlockFunc(func(g *Group) {
			for _, s := range knownSources {
				g.Case(Id(sourceConst(s.Name))).Block(Return(Id(rspConst(s.Name))))
			}
		}),
		Return(Lit("")),
	)
	docComment(f, "Source returns the source a response code answers.")
	f.Func().Params(Id("c").Id("RspCode")).Id("Source").Params().Params(Id("Source"), Bool()).Block(
		Switch(Id("c")).BlockFunc(func(g *Group) {
			for _, s := range knownSources {
				g.Case(Id(rspConst(s.Name))).Block(Return(Id(sourceConst(s.Name)), True()))
			}
		}),
		Return(Lit(""), False()),
	)
	docComment(f, "Meaning describes a response code for people: operators and channel developers.")
	f.Func().Params(Id("c").Id("RspCode")).Id("Meaning").Params().String().Block(
		Switch(Id("c")).BlockFunc(func(g *Group) {
			for _, s := range knownSources {
				g.Case(Id(rspConst(s.Name))).Block(Return(Lit(s.Meaning)))
			}
		}),
		Return(Lit("unknown response code")),
	)
	docComment(f, "LedgerState is the ledger state recorded for the source (SPEC §4):")
	docComment(f, "DONE, UNKNOWN or FAILED, or \"\" when the ledger row is not recorded or left unchanged.")
	f.Func().Params(Id("s").Id("Source")).Id("LedgerState").Params().String().BlockFunc(func(g *Group) {
		byState := map[string][]Code{}
		var states []string
		for _, s := range knownSources {
			if s.LedgerState == "" {
				continue
			}
			if byState[s.LedgerState] == nil {
				states = append(states, s.LedgerState)
			}
			byState[s.LedgerState] = append(byState[s.LedgerState], Id(sourceConst(s.Name)))
		}
		g.Switch(Id("s")).BlockFunc(func(sg *Group) {
			for _, st := range states {
				sg.Case(byState[st]...).Block(Return(Lit(st)))
			}
		})
		g.Return(Lit(""))
	})
	docComment(f, "SourceForResult maps the \"result\" of the core's 422 answer to its source.")
	f.Func().Id("SourceForResult").Params(Id("result").String()).Params(Id("Source"), Bool()).Block(
		Switch(Id("result")).BlockFunc(func(g *Group) {
			for _, s := range knownSources {
				if s.CoreResult {
					g.Case(Lit(s.Name)).Block(Return(Id(sourceConst(s.Name)), True()))
				}
			}
		}),
		Return(Lit(""), False()),
	)
	docComment(f, "Sources lists every source in the order of SPEC §4.")
	f.Func().Id("Sources").Params().Index().Id("Source").Block(
		Return(Index().Id("Source").ValuesFunc(func(g *Group) {
			for _, s := range knownSources {
				g.Id(sourceConst(s.Name))
			}
		})),
	)
	return f
}

// emitRegistry writes the transaction registry and the interfaces every
// generated body satisfies.
func (gn generator) emitRegistry(l *Layouts) *File {
	var sources []string
	for _, tx := range l.Txs {
		sources = append(sources, tx.File)
	}
	f := gn.newFile(strings.Join(sources, ", "))

	docComment(f, "FieldValue is one body field's value in text form, for display.")
	f.Type().Id("FieldValue").Struct(
		Id("Name").String().Comment("layout name, e.g. WD_ACCT"),
		Id("JSON").String().Comment("the core's JSON key"),
		Id("Value").String(),
		Id("Int").Int64().Comment("an Integer field's value, of which Value is the decimal form"),
		Id("Integer").Bool().Comment("an integer in the core's JSON"),
		Id("Account").Bool().Comment("an account number: mask it in logs"),
	)
	bodyMethods := []Code{
		Comment("Decode reads the body from the frame bytes after the header."),
		Id("Decode").Params(Id("body").String()).Error(),
		Comment("AppendTo appends the fixed-width body to dst."),
		Id("AppendTo").Params(Index().Byte()).Params(Index().Byte(), Error()),
		Comment("Set fills a field by JSON key from its text form."),
		Id("Set").Params(Id("key"), Id("value").String()).Error(),
		Comment("Fields lists the values in layout order."),
		Id("Fields").Params().Index().Id("FieldValue"),
		Comment("AppendFields appends them to dst, an Integer's Value left empty."),
		Id("AppendFields").Params(Id("dst").Index().Id("FieldValue")).Index().Id("FieldValue"),
		Comment("TxCode is the TX_CODE of the transaction the body belongs to."),
		Id("TxCode").Params().String(),
		Comment("Flag is the header FLAG of the frames the body travels in."),
		Id("Flag").Params().String(),
	}
	docComment(f, "RequestBody is the typed request body of a registered transaction.")
	f.Type().Id("RequestBody").Interface(append(bodyMethods,
		Comment("CorePath is the path of the core call with the request's values filled in."),
		Id("CorePath").Params().Params(String(), Error()),
		Comment("LookupPath is the path of the lookup that settles an unknown outcome"),
		Comment("of the request with header GUID guid; ErrNoLookup for a transaction"),
		Comment("settled without one (Settle is SettleAsNotPosted)."),
		Id("LookupPath").Params(Id("guid").String()).Params(String(), Error()),
		Comment("AppendCoreJSON appends the request in the core's JSON to dst."),
		Id("AppendCoreJSON").Params(Id("dst").Index().Byte(), Id("guid").String()).Params(Index().Byte(), Error()),
		Comment("CoreJSON is the request in the core's JSON."),
		Id("CoreJSON").Params(Id("guid").String()).Params(Index().Byte(), Error()),
		Comment("FromCoreJSON sets the request from the core's JSON and returns its guid."),
		Id("FromCoreJSON").Params(Id("data").Index().Byte()).Params(String(), Error()),
	)...)
	docComment(f, "ResponseBody is the typed response body of a registered transaction.")
	f.Type().Id("ResponseBody").Interface(append(bodyMethods,
		Comment("AppendCoreJSON appends the body in the core's JSON to dst."),
		Id("AppendCoreJSON").Params(Id("dst").Index().Byte()).Params(Index().Byte(), Error()),
		Comment("CoreJSON is the body in the core's JSON."),
		Id("CoreJSON").Params().Params(Index().Byte(), Error()),
		Comment("FromCoreJSON sets the body from the core's JSON answer."),
		Id("FromCoreJSON").Params(Id("data").Index().Byte()).Error(),
	)...)

	docComment(f, "Settlement is how a transaction's unknown outcome (E901, or a SENT row")
	docComment(f, "orphaned by a relay that died) is settled (SPEC §2, §7).")
	f.Type().Id("Settlement").Int()
	f.Const().Defs(
		Comment("SettleByLookup: ask the core with the transaction's lookup GET; 200"),
		Comment("means posted, 404 never posted, anything else that it cannot tell yet."),
		Id("SettleByLookup").Id("Settlement").Op("=").Iota().Op("+").Lit(1),
		Comment("SettleAsNotPosted: a read (layout: lookup none), which changes"),
		Comment("nothing in the core; settled as never posted without asking, since"),
		Comment("sending it again is harmless."),
		Id("SettleAsNotPosted"),
	)
	docComment(f, "ErrNoLookup is LookupPath's error for a transaction settled without a lookup.")
	f.Var().Id("ErrNoLookup").Op("=").Qual("errors", "New").Call(Lit("the transaction declares lookup none: it is settled without asking the core"))

	docComment(f, "FieldSpec describes one request field for a channel client (what to")
	docComment(f, "send when the caller gives no value) and for tests (which values the")
	docComment(f, "field holds and which it refuses).")
	f.Type().Id("FieldSpec").Struct(
		Id("Name").String().Comment("layout name, e.g. WD_ACCT"),
		Id("JSON").String().Comment("the core's JSON key, which Set takes"),
		Id("Offset").Int().Comment("where the field starts in the body (after the header)"),
		Id("Len").Int().Comment("its width in bytes"),
		Id("Kind").String().Comment("its layout kind: N, X, C, T or H"),
		Comment("Default is the layout's default= value, in the form Set takes;"),
		Comment("HasDefault is false when the layout declares none."),
		Id("Default").String(),
		Id("HasDefault").Bool(),
		Comment("VaryMin..VaryMax is the layout's vary= range, from which a load"),
		Comment("client draws each frame's value; Vary is false when it declares none."),
		Id("VaryMin").Int64(),
		Id("VaryMax").Int64(),
		Id("Vary").Bool(),
		Comment("Codes lists a C field's wire codes, its code map's, in layout order."),
		Id("Codes").Index().String(),
		Comment("Min is the smallest value of an integer N field (option min=);"),
		Comment("HasMin is false when the layout declares none."),
		Id("Min").Int64(),
		Id("HasMin").Bool(),
	)

	docComment(f, "Transaction is one registered transaction code and how it reaches the core.")
	f.Type().Id("Transaction").Struct(
		Id("Code").String().Comment("TX_CODE"),
		Id("Title").String(),
		Id("Method").String().Comment("HTTP method of the core call"),
		Id("Path").String().Comment("path template of the core call"),
		Id("JSONBody").Bool().Comment("the core call carries the request as JSON"),
		Id("RequestLen").Int(),
		Id("ResponseLen").Int(),
		Comment("StatusSources maps core HTTP statuses this transaction answers"),
		Comment("differently from the default rules of SPEC §5."),
		Id("StatusSources").Map(Int()).Id("Source"),
		Comment("Settle is how an unknown outcome is settled; LookupPath is the"),
		Comment("lookup's path template (empty with SettleAsNotPosted)."),
		Id("Settle").Id("Settlement"),
		Id("LookupPath").String(),
		Comment("RequestFields describes the request body's fields in layout order."),
		Id("RequestFields").Index().Id("FieldSpec"),
		Id("NewRequest").Func().Params().Id("RequestBody"),
		Id("NewResponse").Func().Params().Id("ResponseBody"),
	)

	var guards []Code
	f.Var().DefsFunc(func(g *Group) {
		for _, tx := range l.Txs {
			var statuses Code = Nil()
			if len(tx.Status) > 0 {
				statuses = Map(Int()).Id("Source").Values(DictFunc(func(d Dict) {
					for _, r := range tx.Status {
						d[Lit(r.Status)] = Id(sourceConst(r.Source))
					}
				}))
			}
			g.Id(strings.ToLower(tx.Code)).Op("=").Id("Transaction").Custom(multiLine,
				Id("Code").Op(":").Lit(tx.Code),
				Id("Title").Op(":").Lit(tx.Title),
				Id("Method").Op(":").Lit(tx.Method),
				Id("Path").Op(":").Lit(tx.Path),
				Id("JSONBody").Op(":").Lit(tx.Body == "json"),
				Id("RequestLen").Op(":").Id(tx.Code+"RequestLen"),
				Id("ResponseLen").Op(":").Id(tx.Code+"ResponseLen"),
				Id("StatusSources").Op(":").Add(statuses),
				Id("Settle").Op(":").Id(settleConst(tx)),
				Id("LookupPath").Op(":").Lit(tx.Lookup.Path),
				Id("RequestFields").Op(":").Add(fieldSpecs(tx.Request.Fields)),
				Id("NewRequest").Op(":").Func().Params().Id("RequestBody").Block(Return(New(Id(tx.Code+"Request")))),
				Id("NewResponse").Op(":").Func().Params().Id("ResponseBody").Block(Return(New(Id(tx.Code+"Response")))),
			)
			guards = append(guards,
				Id(tx.Code+"RequestLen").Op("-").Lit(tx.Request.Declared),
				Id(tx.Code+"ResponseLen").Op("-").Lit(tx.Response.Declared))
		}
	})
	emitGuard(f, "the body lengths registered here", guards...)

	docComment(f, "LookupTransaction returns the registered transaction with the TX_CODE code.")
	f.Func().Id("LookupTransaction").Params(Id("code").String()).Params(Op("*").Id("Transaction"), Bool()).Block(
		Switch(Id("code")).BlockFunc(func(g *Group) {
			for _, tx := range l.Txs {
				g.Case(Lit(tx.Code)).Block(Return(Op("&").Id(strings.ToLower(tx.Code)), True()))
			}
		}),
		Return(Nil(), False()),
	)
	def := l.Txs[0]
	for _, tx := range l.Txs {
		if tx.ClientDefault {
			def = tx
		}
	}
	docComment(f, "ClientDefault is the transaction a channel client sends when none is named:")
	if def.ClientDefault {
		docComment(f, "the one whose layout says client default.")
	} else {
		docComment(f, "no layout says client default, so the first by code.")
	}
	f.Func().Id("ClientDefault").Params().Op("*").Id("Transaction").Block(Return(Op("&").Id(strings.ToLower(def.Code))))

	docComment(f, "Transactions lists every registered transaction, ordered by code.")
	f.Func().Id("Transactions").Params().Index().Op("*").Id("Transaction").Block(
		Return(Index().Op("*").Id("Transaction").CustomFunc(multiLine, func(g *Group) {
			for _, tx := range l.Txs {
				g.Op("&").Id(strings.ToLower(tx.Code))
			}
		})),
	)
	return f
}

func settleConst(tx *Transaction) string {
	if tx.Lookup.None {
		return "SettleAsNotPosted"
	}
	return "SettleByLookup"
}

// fieldSpecs emits the FieldSpec list of a request section.
func fieldSpecs(fields []*Field) Code {
	return Index().Id("FieldSpec").CustomFunc(multiLine, func(g *Group) {
		for _, fd := range fields {
			items := []Code{Id("Name").Op(":").Lit(fd.Name), Id("JSON").Op(":").Lit(fd.JSON),
				Id("Offset").Op(":").Lit(fd.Start), Id("Len").Op(":").Lit(fd.Len), Id("Kind").Op(":").Lit(string(rune(fd.Kind)))}
			if fd.HasDefault {
				items = append(items, Id("Default").Op(":").Lit(fd.Default), Id("HasDefault").Op(":").True())
			}
			if fd.Vary {
				items = append(items, Id("VaryMin").Op(":").Lit(int(fd.VaryMin)), Id("VaryMax").Op(":").Lit(int(fd.VaryMax)), Id("Vary").Op(":").True())
			}
			if fd.Map != "" {
				items = append(items, Id("Codes").Op(":").Id(goName(fd.Map)+"Codes").Call())
			}
			if fd.HasMin {
				items = append(items, Id("Min").Op(":").Lit(int(fd.Min)), Id("HasMin").Op(":").True())
			}
			g.Values(items...)
		}
	})
}
