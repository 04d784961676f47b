FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY requirements requirements
COPY kb kb
COPY agents agents
COPY api api
COPY tenants tenants
COPY bench bench
COPY templates templates
COPY manage.py ./
RUN pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir ".[local-embed]" \
 && pip install --no-cache-dir --no-deps --require-hashes -r requirements/relevance.txt \
 && SECRET_KEY=build DEBUG=0 DATABASE_URL=postgres://x:x@localhost/x python manage.py collectstatic --no-input
RUN useradd --create-home grounded && install -d -o grounded -g grounded /var/lib/grounded/digests
USER grounded
EXPOSE 8000
ENV GUNICORN_BIND=0.0.0.0:8000
CMD ["gunicorn", "-c", "python:api.project.gunicorn_conf", "api.project.wsgi:application"]
