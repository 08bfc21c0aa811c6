// CSV export of a table (AG Grid), made in the browser: the rows as filtered and sorted,
// the headers as shown, a value quoted only when it holds a comma, a quote or a line break
// (as a spreadsheet writes it). The button names its grid (data-csv-grid, dashboard/grids.py).
(function () {
    const quoted = (value) => {
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
