// CSV export of a table (AG Grid), made in the browser: the rows as filtered and sorted,
// the headers as shown, a value quoted only when it holds a comma, a quote or a line break
// (as a spreadsheet writes it). The button names its grid (data-csv-grid, dashboard/grids.py).
// A text cell that a spreadsheet would run as a formula (it starts with = + - @, a tab or a
// carriage return: a trace names its kernels as it likes) gets a leading ' and is shown as
// text; numbers, negative ones too, stay numbers (analyzers/report/export.py does the same).
(function () {
    const FORMULA_START = /^[=+\-@\t\r]/;
    const PLAIN_NUMBER = /^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/;
    const inert = (value) => typeof value === "string" && FORMULA_START.test(value)
        && !PLAIN_NUMBER.test(value) ? "'" + value : value;
    const quoted = (value) => {
        value = inert(value);
        const text = value === null || value === undefined ? "" : String(value);
        return /[",\r\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
    };
    document.addEventListener("click", (event) => {
        const button = event.target.closest ? event.target.closest("[data-csv-grid]") : null;
        if (!button || !window.dash_ag_grid) { return; }
        const id = button.getAttribute("data-csv-grid");
        window.dash_ag_grid.getApiAsync(id).then((api) => api.exportDataAsCsv({
            fileName: id + ".csv",
            suppressQuotes: true,
            processCellCallback: (p) => quoted(p.value),
            processHeaderCallback: (p) => quoted(p.api.getDisplayNameForColumn(p.column, null)),
        }), () => {});  // the grid is gone (the page changed): nothing to export
    });
})();
