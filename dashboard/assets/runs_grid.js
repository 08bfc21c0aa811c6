// The Runs grid's cells (dashboard/pages/runs.py): each row holds plain values (what AG Grid
// sorts and filters) and the hover texts and colours drawn here. A run's name and its "open"
// button navigate inside the app as dcc.Link does (a plain click; a modified one opens the
// address as the browser would).
(function () {
    const funcs = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});
    const h = (...args) => window.React.createElement(...args);
    const go = (event, href) => {
        if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
            return;
        }
        event.preventDefault();
        window.history.pushState({}, "", href);
        window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
        window.scrollTo(0, 0);
    };
    const link = (d, text, className) =>
        h("a", {href: d.href, className: className, onClick: (e) => go(e, d.href)}, text);
    const done = (d) => d.state === "done";

    funcs.RunLink = (props) => link(props.data, props.data.run, "runlink");
    funcs.RunOpen = (props) => link(props.data, "open", "button small");
    funcs.RunStatus = (props) => {
        const d = props.data;
        if (!done(d)) { return ""; }
        const pill = d.status === "ok"
            ? h("span", {className: "muted status-ok"}, "ok")
            : h("span", {className: "badge badge-status badge-" + d.status, title: d.status_title},
                d.status);
        const notes = d.notes ? h("span", {className: "run-notes", title: d.notes_title}, d.notes)
            : null;
        return h("span", null, pill, notes);
    };
    funcs.RunVerdict = (props) => {
        const d = props.data;
        if (!done(d)) {
            return h("span", {className: d.message === "error" ? "error" : "muted pending"},
                d.verdict);
        }
        const style = d.color ? {backgroundColor: d.color} : {};
        return h("span", null,
            h("span", {className: "badge badge-" + d.part, style: style}, d.verdict),
            d.stragglers ? h("span", {className: "pill-warn"}, d.stragglers) : null);
    };
    funcs.RunRanks = (props) => {
        const d = props.data;
        if (!done(d)) { return ""; }
        return h("span", {className: d.ranks_warn ? "pill-warn" : "", title: d.ranks_title},
            d.ranks);
    };
})();
